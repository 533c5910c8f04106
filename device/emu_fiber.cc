// Fiber stacks and context switches (x86-64 assembly; ucontext elsewhere), with
// the sanitizers told of every switch.
#include "device/emu_fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

#include "kiln/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define KILN_FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define KILN_FIBER_TSAN 1
#endif

#if defined(__x86_64__)
// kiln_fiber_switch(save, next): pushes the callee-saved registers and the SSE
// and x87 control words, stores the stack pointer in *save, loads `next` and
// pops the same frame from it. A new fiber's frame returns into the trampoline,
// which calls r13(r12).
extern "C" void kiln_fiber_switch(void** save, void* next);
asm(R"(
  .text
  .p2align 4
  .globl kiln_fiber_switch
  .hidden kiln_fiber_switch
  .type kiln_fiber_switch,@function
kiln_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_fiber_switch, .-kiln_fiber_switch
  .p2align 4
  .globl kiln_fiber_trampoline
  .hidden kiln_fiber_trampoline
  .type kiln_fiber_trampoline,@function
kiln_fiber_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size kiln_fiber_trampoline, .-kiln_fiber_trampoline
)");
extern "C" void kiln_fiber_trampoline();
#else
#include <ucontext.h>
#endif

namespace kiln::device {

#ifdef KILN_FIBER_ASAN
namespace {
// The host thread's own stack, as the sanitizer reports it when a fiber first
// runs (fibers only ever switch back to the host thread that started them).
thread_local const void* hostStackBottom = nullptr;
thread_local size_t hostStackSize = 0;
}  // namespace
#endif

FiberStack::FiberStack(size_t bytes) {
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_ = (bytes + page - 1) / page * page;
  mapped_ = size_ + page;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) throw Error("the CUDA emulator cannot map a fiber stack of " + std::to_string(mapped_) + " bytes");
  mapping_ = static_cast<char*>(p);
  // The lowest page stays inaccessible: a fiber that overflows its stack faults
  // there instead of writing into a neighbour's.
  ::mprotect(mapping_, page, PROT_NONE);
  base_ = mapping_ + page;
}

FiberStack::~FiberStack() {
  if (!mapping_) return;
#ifdef KILN_FIBER_ASAN
  // Fibers' frames leave their redzones poisoned in the shadow, and munmap does
  // not clear it: memory mapped here later (a heap block, a thread's stack) would
  // be reported as a stack-buffer-underflow when written (seen under CI load).
  __asan_unpoison_memory_region(base_, size_);
#endif
  ::munmap(mapping_, mapped_);
}

Fiber::Fiber() {
#ifdef KILN_FIBER_TSAN
  tsanFiber_ = __tsan_get_current_fiber();
#endif
}

Fiber::~Fiber() {
#ifdef KILN_FIBER_TSAN
  if (ownsTsanFiber_) __tsan_destroy_fiber(tsanFiber_);
#endif
#if !defined(__x86_64__)
  delete static_cast<ucontext_t*>(sp_);
#endif
}

void fiberEntry(Fiber* self) {
#ifdef KILN_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &hostStackBottom, &hostStackSize);
#endif
  self->fn_(self->arg_);
  std::abort();  // fn never returns (it exits)
}

namespace {
extern "C" void kilnFiberEntryThunk(void* self) { fiberEntry(static_cast<Fiber*>(self)); }
}  // namespace

void Fiber::start(FiberStack& stack, void (*fn)(void*), void* arg) {
  stack_ = &stack;
  fn_ = fn;
  arg_ = arg;
  stackBottom_ = stack.bottom();
  stackSize_ = stack.size();
  fakeStack_ = nullptr;
#ifdef KILN_FIBER_TSAN
  if (!ownsTsanFiber_) {
    tsanFiber_ = __tsan_create_fiber(0);
    ownsTsanFiber_ = true;
  }
#endif
#if defined(__x86_64__)
  auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack.top()) & ~uintptr_t(15));
  // From the saved stack pointer up: control words, r15, r14, r13, r12, rbx,
  // rbp, the return address; the trampoline then runs with a 16-byte aligned
  // stack pointer, as a call expects.
  uint64_t* sp = top - 10;
  uint32_t mxcsr = 0;
  uint16_t fcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  sp[0] = mxcsr | (uint64_t(fcw) << 32);
  sp[1] = 0;                                                     // r15
  sp[2] = 0;                                                     // r14
  sp[3] = reinterpret_cast<uint64_t>(&kilnFiberEntryThunk);      // r13: the function
  sp[4] = reinterpret_cast<uint64_t>(this);                      // r12: its argument
  sp[5] = 0;                                                     // rbx
  sp[6] = 0;                                                     // rbp
  sp[7] = reinterpret_cast<uint64_t>(&kiln_fiber_trampoline);    // return address
  sp_ = sp;
#else
  auto* uc = static_cast<ucontext_t*>(sp_);
  if (!uc) sp_ = uc = new ucontext_t();
  ::getcontext(uc);
  uc->uc_stack.ss_sp = stack.bottom();
  uc->uc_stack.ss_size = stack.size();
  uc->uc_link = nullptr;
  ::makecontext(uc, reinterpret_cast<void (*)()>(&kilnFiberEntryThunk), 1, this);
#endif
}

void Fiber::switchImpl(Fiber& from, Fiber& to, bool exiting) {
#ifdef KILN_FIBER_ASAN
  const void* bottom = to.stackBottom_ ? to.stackBottom_ : hostStackBottom;
  size_t size = to.stackBottom_ ? to.stackSize_ : hostStackSize;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &from.fakeStack_, bottom, size);
#else
  (void)exiting;
#endif
#ifdef KILN_FIBER_TSAN
  __tsan_switch_to_fiber(to.tsanFiber_, 0);
#endif
#if defined(__x86_64__)
  kiln_fiber_switch(&from.sp_, to.sp_);
#else
  if (!from.sp_) from.sp_ = new ucontext_t();
  ::swapcontext(static_cast<ucontext_t*>(from.sp_), static_cast<ucontext_t*>(to.sp_));
#endif
#ifdef KILN_FIBER_ASAN
  const void* prevBottom = nullptr;
  size_t prevSize = 0;
  __sanitizer_finish_switch_fiber(from.fakeStack_, &prevBottom, &prevSize);
  if (!from.stackBottom_) {
    hostStackBottom = hostStackBottom ? hostStackBottom : prevBottom;
  }
#endif
}

void Fiber::switchTo(Fiber& from, Fiber& to) { switchImpl(from, to, false); }

void Fiber::exit(Fiber& from, Fiber& to) {
  switchImpl(from, to, true);
  std::abort();  // an exited fiber is never resumed
}

void Fiber::abandon() {
#ifdef KILN_FIBER_ASAN
  // Its frames' redzones stay poisoned; the next fiber on this stack starts clean.
  if (stack_) __asan_unpoison_memory_region(stack_->bottom(), stack_->size());
#endif
  fakeStack_ = nullptr;
}

}  // namespace kiln::device
