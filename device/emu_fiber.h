// Fibers for the emulated CUDA device: each GPU thread of a block runs on a
// stack of its own and gives the host thread back at barriers and warp-wide
// operations, so every thread of a block reaches a barrier before any passes it.
//
// Representation: a FiberStack is an mmap'd stack with a guard page below it,
// kept and reused for the life of its owner (a block's threads reuse the stacks
// of the previous block). A switch saves the callee-saved registers and the
// floating-point control words on the running stack and loads the other's
// (x86-64: a few instructions; elsewhere ucontext). The sanitizers are told of
// every switch, so AddressSanitizer and ThreadSanitizer follow the stacks.
//
// Thread-safety: fibers never move between host threads; each host thread that
// launches emulated kernels has its own (see emu_block.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::device {

class FiberStack {
 public:
  explicit FiberStack(size_t bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  char* top() const { return base_ + size_; }
  char* bottom() const { return base_; }
  size_t size() const { return size_; }

 private:
  char* mapping_ = nullptr;  // guard page + stack
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

// A saved execution context: the host thread's own (made by default
// construction) or a fiber's (start()).
class Fiber {
 public:
  Fiber();
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Prepares this fiber to run `fn(arg)` from the top of `stack` at its next
  // switchTo. `fn` must never return: it ends by switching away for good
  // (exit()).
  void start(FiberStack& stack, void (*fn)(void*), void* arg);
  // Saves the running context into `from` and runs `to`.
  static void switchTo(Fiber& from, Fiber& to);
  // Like switchTo, for a fiber that will never run again (its stack may be reused).
  [[noreturn]] static void exit(Fiber& from, Fiber& to);
  // After abandoning a started fiber without it exiting: its stack may be reused.
  void abandon();

 private:
  static void switchImpl(Fiber& from, Fiber& to, bool exiting);
  void* sp_ = nullptr;        // saved stack pointer (x86-64) or ucontext
  const void* stackBottom_ = nullptr;
  size_t stackSize_ = 0;
  void* fakeStack_ = nullptr;  // AddressSanitizer's fake stack while switched out
  void* tsanFiber_ = nullptr;  // ThreadSanitizer's fiber, for started fibers
  bool ownsTsanFiber_ = false;
  FiberStack* stack_ = nullptr;
  void (*fn_)(void*) = nullptr;
  void* arg_ = nullptr;
  friend void fiberEntry(Fiber* self);
};

}  // namespace kiln::device
