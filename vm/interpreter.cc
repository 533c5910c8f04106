// The dispatch loop: one handler per opcode, threaded with computed goto (a
// switch elsewhere). Hot state — code pointer, pc and the frame's register base —
// lives in locals and is written back only around calls, as in Lua's lvm.c.
//
// Invariants the handlers rely on: the verifier has checked every register index
// against the frame size, every jump target, every table index and every static
// arity, so handlers check only what depends on run-time values (the kind of value
// in a register, closure arities, shapes).
#include <algorithm>
#include <cstring>

#include "bytecode/opcodes.h"
#include "bytecode/operands.h"

// Computed goto (labels as values) is a GCC/Clang extension, used on purpose.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include "device/cuda_stream.h"
#include "jit/kernel.h"
#include "kiln/error.h"
#include "kiln/vm.h"
#include "vm/bound_kernels.h"
#include "vm/dynamic_ops.h"
#include "vm/gpu_streams.h"
#include "vm/memory.h"
#include "vm/memory_trace.h"
#include "vm/row_batcher.h"
#include "kernel_ir/scalar_kernel.h"

namespace kiln {

using bytecode::Opcode;

namespace {

Tensor tensorOf(const Value& v, const char* what) {
  if (v.isObject(ObjectKind::Tensor)) return v.asTensorObject()->tensor;
  if (v.isScalar()) return v.tensor();
  throw Error(std::string(what) + ": expected a tensor, got " + v.describe());
}

Tensor shapeTensor(std::span<const int64_t> shape) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(shape.size())});
  if (!shape.empty()) std::memcpy(t.data(), shape.data(), shape.size() * 8);
  return t;
}

Shape shapeFromTensor(const Value& v) {
  Tensor t = tensorOf(v, "shape");
  if (t.rank() != 1 || t.dtype() != DType::Int64) throw Error("a shape must be an int64 vector, got " + v.describe());
  const int64_t* p = t.data<int64_t>();
  Shape s(p, p + t.shape()[0]);
  for (int64_t d : s)
    if (d < 0) throw Error("negative dimension in shape " + shapeString(s));
  return s;
}

RefObject* refOf(const Value& v, const char* what) {
  if (!v.isRef()) throw Error(std::string(what) + ": expected a reference cell, got " + v.describe());
  return v.asRef();
}

[[noreturn, gnu::cold, gnu::noinline]] void notAnAdt(const Value& v, const char* what) {
  throw Error(std::string(what) + ": expected a tuple or ADT value, got " + v.describe());
}

// Inline, its error out of line: a match and a field read per tree node each
// paid a call with the frame of the throwing path.
inline const AdtObject* adtOf(const Value& v, const char* what) {
  if (!v.isObject(ObjectKind::Adt)) [[unlikely]]
    notAnAdt(v, what);
  return v.asAdt();
}

// Field i of the tuple or ADT value v (get_field, get_field_view).
inline const Value& fieldOf(const Value& v, uint32_t i, const char* what) {
  const AdtObject* a = adtOf(v, what);
  if (i >= a->size) throw Error("field " + std::to_string(i) + " of a value with " + std::to_string(a->size) + " fields");
  return a->fields()[i];
}

// Arguments gathered before a call's frame is filled: a tail call's frame is
// its caller's own, a closure's captured values come first, and a fork hands
// them to another VM. Contiguous, the first kInline in the object itself: a
// push is a move and an increment, inline (a small_vector's push_back was an
// out-of-line call per argument). Moved-from entries are empty, so clear()
// releases only what a call left behind.
class ArgBuffer {
 public:
  ArgBuffer() = default;
  ArgBuffer(const ArgBuffer&) = delete;
  ArgBuffer& operator=(const ArgBuffer&) = delete;
  void push_back(Value v) {
    if (size_ == capacity_) [[unlikely]]
      grow();
    data_[size_++] = std::move(v);
  }
  Value* data() { return data_; }
  size_t size() const { return size_; }
  Value& operator[](size_t i) { return data_[i]; }
  void clear() {
    for (size_t i = 0; i < size_; ++i) data_[i].reset();
    size_ = 0;
  }

 private:
  static constexpr size_t kInline = 8;
  [[gnu::noinline]] void grow() {
    std::vector<Value> bigger(capacity_ * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move(data_[i]);
    heap_ = std::move(bigger);
    data_ = heap_.data();
    capacity_ = heap_.size();
  }
  Value inline_[kInline];
  std::vector<Value> heap_;
  Value* data_ = inline_;
  size_t size_ = 0, capacity_ = kInline;
};

}  // namespace

Value VirtualMachine::run(uint32_t entry, std::span<const Value> args) {
  const Executable& exe = *exe_;
  const BytecodeFunction* fn = &exe.functions()[entry];
  if (regs_.size() < fn->frameSize) regs_.resize(std::max<size_t>(fn->frameSize, 256));
  for (size_t i = 0; i < args.size(); ++i) regs_[i] = args[i];
  frames_.push_back(Frame{entry, 0, 0, 0});

  // Recycled outputs (vm/memory.h) do not outlive the run, nor does a fork
  // (an error between a fork and its join leaves it in flight: it is waited for).
  struct EndOfRun {
    VirtualMachine& vm;
    ~EndOfRun() {
      vm.settleFork();
      vm.memory_->dropRecycled();
    }
  } endOfRun{*this};

  const uint32_t* code = fn->code.data();
  uint32_t pc = 0;
  uint32_t base = 0;
  Value* R = regs_.data();
  Value result;

  // Small scratch lists for kernel operands (a kernel has few parameters).
  boost::container::small_vector<Tensor, 8> ins, outs;
  // A CPU kernel's scalar inputs (a loop counter read by a `take`), each a 0-d
  // tensor over a slot here for the call, instead of a pool allocation per call.
  constexpr size_t kScalarSlots = 4;
  alignas(64) std::byte scalarSlots[kScalarSlots][64];
  // invoke_kernel's operands, by reference to the tensors in the registers.
  constexpr uint32_t kInlineOperands = 16;
  const Tensor* inOnStack[kInlineOperands];
  const Tensor* outOnStack[kInlineOperands];
  std::vector<const Tensor*> inMore, outMore;  // for longer lists
  ArgBuffer argTmp;
  vm::MemoryTrace* trace = memoryTrace_.get();  // null unless enableMemoryTrace()
  // Deferral moves a kernel's time and memory traffic away from its call: off
  // while those are measured where the calls are made.
  vm::RowBatcher* rows = profiling_ || trace ? nullptr : batcher_.get();
  // Where requestStop and the time limit land (kiln/vm.h, "Stopping a run"):
  // read at every call, tail call, fork and backward jump, so that no loop or
  // recursion runs on past a stop; a relaxed load, a plain load on x86.
  const std::atomic<uint8_t>* stopWord = stopSource_;

// Each handler opens the typed view of its own instruction (bytecode/operands.h):
// operands by their position in the table, kinds checked at compile time,
// offsets and lengths generated from the table (constants where no list precedes).
// Kernel calls the row batcher deferred run before any instruction that could
// see their memory: all but those the opcode table marks P (vm/row_batcher.h).
#define RUN_DEFERRED() \
  if (rows && rows->pending()) rows->flush()
#define OPS(name)                                           \
  const bytecode::Operands<Opcode::name> o(code + pc);      \
  if constexpr (!bytecode::passesDeferred(Opcode::name)) {  \
    RUN_DEFERRED();                                         \
  }
#define REG(k) R[o.reg<k>()]
#define IDX(k) o.index<k>()
#define NEXT() pc += o.length()
#define STOP_POINT()                                                              \
  do {                                                                            \
    if (uint8_t why = stopWord->load(std::memory_order_relaxed)) [[unlikely]] \
      stopped(why);                                                               \
  } while (0)
// An `M` list entry: moved out when marked (the value's last use), else copied.
// A `B` entry's view bit makes it a copy here: a view is made only where the
// callee's frame is filled (enterWithArgs).
#define TAKE(r) ((r) & bytecode::kMoveBit ? std::move(R[(r) & ~bytecode::kMoveBit]) : Value(R[bytecode::listRegister(r)]))
// After enter/reenter: the callee's code from its first instruction, its registers at `base`.
#define ENTERED(callee)                \
  fn = &exe.functions()[callee];       \
  code = fn->code.data();              \
  pc = 0;                              \
  R = regs_.data() + base

// A handler's locals live in its braces and DISPATCH() comes after them: a computed
// goto out of a scope does not run destructors, so it must leave none behind.
#if defined(__GNUC__)
  static void* const kLabels[] = {
#define KILN_OPCODE(name, mnemonic, operands, flags, meaning) &&L_##name,
#include "bytecode/opcodes.def"
#undef KILN_OPCODE
  };
#define DISPATCH() goto* kLabels[code[pc]]
#define CASE(name) L_##name:
#else
#define DISPATCH() goto dispatch
#define CASE(name) case Opcode::name:
#endif

  // The helpers below take the hot state (fn, code, pc, base, R) as arguments
  // and never capture it: a lambda capturing a local by reference takes its
  // address, and GCC then kept pc and R in memory, a load and a store around
  // every instruction. After a call or tail call the loop reloads its state.
  //
  // Makes room for a frame for `callee` above the current one (resuming at
  // `next`, its result into register `dst`) and returns its base; the caller
  // fills the parameters and pushes the frame.
  auto openFrame = [this, &exe](const BytecodeFunction* current, uint32_t currentBase, uint32_t callee, uint32_t next,
                                uint32_t dst) -> uint32_t {
    if (frames_.size() >= options_.maxCallDepth)
      throw Error("recursion too deep (more than " + std::to_string(options_.maxCallDepth) + " nested calls)");
    frames_.back().returnPc = next;
    frames_.back().dst = dst;
    uint32_t newBase = currentBase + current->frameSize;
    const BytecodeFunction* cf = &exe.functions()[callee];
    if (regs_.size() < size_t(newBase) + cf->frameSize) regs_.resize((size_t(newBase) + cf->frameSize) * 2);
    return newBase;
  };
  // Pushes a frame for `callee` with the arguments in argTmp; returns its base.
  auto enter = [this, &openFrame, &argTmp](const BytecodeFunction* current, uint32_t currentBase, uint32_t callee,
                                           uint32_t next, uint32_t dst) -> uint32_t {
    uint32_t newBase = openFrame(current, currentBase, callee, next, dst);
    Value* nr = regs_.data() + newBase;
    for (size_t i = 0; i < argTmp.size(); ++i) nr[i] = std::move(argTmp[i]);
    argTmp.clear();
    frames_.push_back(Frame{callee, 0, newBase, 0});
    return newBase;
  };
  // The same for an invoke, with the listed registers of the current frame as
  // the arguments, moved, copied or viewed straight into the new frame (no
  // gathering: the two frames never overlap). A view is sound because the
  // caller's register holds its value, untouched, until the callee returns.
  auto enterWithArgs = [this, &openFrame](const BytecodeFunction* current, uint32_t currentBase, uint32_t callee,
                                          uint32_t next, uint32_t dst, bytecode::RegisterList args) -> uint32_t {
    uint32_t newBase = openFrame(current, currentBase, callee, next, dst);
    Value* R = regs_.data() + currentBase;
    Value* nr = regs_.data() + newBase;
    for (uint32_t i = 0; i < args.size; ++i) {
      uint32_t e = args[i];
      if (e & bytecode::kViewBit) nr[i].view(R[bytecode::listRegister(e)]);
      else nr[i] = TAKE(e);
    }
    frames_.push_back(Frame{callee, 0, newBase, 0});
    return newBase;
  };
  // Replaces the current frame (at `currentBase`) by `callee` with the arguments in argTmp.
  auto reenter = [this, &exe, &argTmp](const BytecodeFunction* current, uint32_t currentBase, uint32_t callee) {
    const BytecodeFunction* cf = &exe.functions()[callee];
    Value* r = regs_.data() + currentBase;
    for (uint32_t i = 0; i < current->frameSize; ++i) r[i].reset();
    if (regs_.size() < size_t(currentBase) + cf->frameSize) {
      regs_.resize((size_t(currentBase) + cf->frameSize) * 2);
      r = regs_.data() + currentBase;
    }
    for (size_t i = 0; i < argTmp.size(); ++i) r[i] = std::move(argTmp[i]);
    argTmp.clear();
    frames_.back().function = callee;
  };
  // Collects a closure's captured values and the listed registers (of the frame
  // at R) into argTmp.
  auto closureArgs = [&exe, &argTmp](Value* R, const Value& c, bytecode::RegisterList list) -> uint32_t {
    uint32_t n = list.size;
    if (!c.isClosure()) throw Error("call of a value that is not a function: " + c.describe());
    const ClosureObject* clo = c.asClosure();
    const BytecodeFunction& cf = exe.functions()[clo->function];
    if (clo->size + n != cf.numParams)
      throw Error("closure of @" + cf.name + " called with " + std::to_string(n) + " arguments, expects " +
                  std::to_string(cf.numParams - clo->size));
    for (uint32_t i = 0; i < clo->size; ++i) argTmp.push_back(clo->captured()[i]);
    for (uint32_t i = 0; i < n; ++i) argTmp.push_back(TAKE(list[i]));
    return clo->function;
  };
  // An ADT value (a tuple for kTupleCtor) of an `M` list's values, taken in
  // order, gathered on the stack: no heap buffer beside the value itself.
  auto makeAdt = [](Value* R, uint32_t ctor, bytecode::RegisterList list) {
    boost::container::small_vector<Value, 8> fields;
    for (uint32_t i = 0; i < list.size; ++i) fields.push_back(TAKE(list[i]));
    return Value::adtTaking(ctor, std::span<Value>(fields.data(), fields.size()));
  };
  auto traceReads = [&](const auto& ts) {
    for (const Tensor& t : ts) trace->read(t);
  };
  auto gatherInputs = [&ins](const Value* R, bytecode::RegisterList list) {
    ins.clear();
    for (uint32_t i = 0; i < list.size; ++i) ins.push_back(tensorOf(R[list[i]], "kernel input"));
  };
  auto recordKernel = [this, &exe](uint32_t k, uint64_t t0) {
    uint64_t t1 = nowNanos();
    profile_[k].calls++;
    profile_[k].totalNanos += t1 - t0;
    if (tracing_) trace_.push_back({exe.kernels()[k].function->name, t0, t1 - t0});
  };
  // The kernel runs where its outputs were allocated (placement puts its inputs
  // there too; CompiledKernel checks every input's device).
  vm::BoundKernels& kernels = *kernels_;

#if defined(__GNUC__)
  DISPATCH();
#else
dispatch:
  switch (static_cast<Opcode>(code[pc])) {
#endif

  CASE(Move) {
    OPS(Move);
    REG(0) = REG(1);
    NEXT();
  }
  DISPATCH();
  CASE(Ret) {
    OPS(Ret);
    Value v = std::move(REG(0));
    // The emitter releases each register after its last use, but for those
    // whose last use is right before the return: those are dropped here, and
    // recycled as a release would (vm/memory.h).
    for (uint32_t i = 0; i < fn->frameSize; ++i)
      if (!R[i].empty() && !memory_->recycle(R[i])) R[i].reset();
    frames_.pop_back();
    if (frames_.empty()) {
      RUN_DEFERRED();  // what the caller gets is computed
      result = std::move(v);
      goto done;
    }
    const Frame& caller = frames_.back();
    fn = &exe.functions()[caller.function];
    code = fn->code.data();
    pc = caller.returnPc;
    base = caller.base;
    R = regs_.data() + base;
    R[caller.dst] = std::move(v);
  }
  DISPATCH();
  CASE(Invoke) {
    OPS(Invoke);
    STOP_POINT();
    uint32_t callee = IDX(1);
    base = enterWithArgs(fn, base, callee, pc + o.length(), o.reg<0>(), o.list<2>());
    ENTERED(callee);
  }
  DISPATCH();
  CASE(Fork) {
    // The call goes to a worker when startFork can (kiln/vm.h, "Forks"), and
    // this thread goes on to the join; otherwise it is an invoke. A fork's
    // arguments are owned (TAKE copies what the list passes as views): the
    // caller goes on, and may release them, while the callee runs.
    OPS(Fork);
    STOP_POINT();
    bytecode::RegisterList args = o.list<2>();
    uint32_t callee = IDX(1);
    // The site (function, pc) is looked at only where forks are possible: on one
    // thread a fork is an invoke and touches nothing else.
#define FORK_SITE() (static_cast<uint64_t>(frames_.back().function) << 32 | pc)
    if (!forksPossible_ || !mayFork(FORK_SITE())) {
      base = enterWithArgs(fn, base, callee, pc + o.length(), o.reg<0>(), args);
      ENTERED(callee);
      DISPATCH();
    }
    // The other thread may read what deferred calls write.
    RUN_DEFERRED();
    for (uint32_t i = 0; i < args.size; ++i) argTmp.push_back(TAKE(args[i]));
    if (startFork(callee, std::span<Value>(argTmp.data(), argTmp.size()), base + o.reg<0>(), FORK_SITE())) {
      argTmp.clear();
      REG(0).reset();
      NEXT();
    } else {
      base = enter(fn, base, callee, pc + o.length(), o.reg<0>());
      ENTERED(callee);
    }
  }
  DISPATCH();
#undef FORK_SITE
  CASE(Join) {
    OPS(Join);
    if (forkPending(base + o.reg<0>())) {
      // This thread's deferred calls run while the fork does, not after it.
      RUN_DEFERRED();
      REG(0) = joinFork();
    }
    NEXT();
  }
  DISPATCH();
  CASE(TailCall) {
    OPS(TailCall);
    STOP_POINT();
    bytecode::RegisterList args = o.list<1>();
    for (uint32_t i = 0; i < args.size; ++i) argTmp.push_back(TAKE(args[i]));
    uint32_t callee = IDX(0);
    reenter(fn, base, callee);
    ENTERED(callee);
  }
  DISPATCH();
  CASE(InvokeClosure) {
    OPS(InvokeClosure);
    STOP_POINT();
    uint32_t callee = closureArgs(R, REG(1), o.list<2>());
    base = enter(fn, base, callee, pc + o.length(), o.reg<0>());
    ENTERED(callee);
  }
  DISPATCH();
  CASE(TailCallClosure) {
    OPS(TailCallClosure);
    STOP_POINT();
    uint32_t callee = closureArgs(R, REG(0), o.list<1>());
    reenter(fn, base, callee);
    ENTERED(callee);
  }
  DISPATCH();
  CASE(InvokeKernel) {
    OPS(InvokeKernel);
    uint32_t k = IDX(0);
    if (rows) {
      if (rows->defer(k, R, o.list<1>(), o.list<2>())) {
        NEXT();
        DISPATCH();
      }
      // Run now: what it reads or writes may be a deferred call's.
      RUN_DEFERRED();
    }
    // Operands by reference to the tensors in the registers (no copies); a
    // scalar register's value becomes a 0-d tensor kept in ins/outs for the call
    // (reserved first, so those never move while referenced). For a kernel on
    // the CPU, which reads its inputs before it returns, that tensor views one
    // of scalarSlots (owned by no one); elsewhere it is allocated.
    // Filled in place, on the stack up to kInlineOperands: a push_back or a
    // resize per operand list was an out-of-line call each. temps is reserved
    // at the first scalar, before any pointer into it is taken.
    auto refer = [R, &scalarSlots](bytecode::RegisterList list, const Tensor** onStack, std::vector<const Tensor*>& more,
                                   boost::container::small_vector<Tensor, 8>& temps, const char* what, bool hostSlots) {
      size_t slot = 0;
      const Tensor** out = onStack;
      if (list.size > kInlineOperands) {
        more.resize(list.size);
        out = more.data();
      }
      bool reserved = false;
      for (uint32_t i = 0; i < list.size; ++i) {
        const Value& v = R[list[i]];
        if (v.isObject(ObjectKind::Tensor)) [[likely]] {
          out[i] = &v.asTensorObject()->tensor;
        } else {
          if (!reserved) {
            temps.clear();
            temps.reserve(list.size);
            reserved = true;
          }
          if (hostSlots && v.isScalar() && slot < kScalarSlots) {
            void* p = scalarSlots[slot++];
            writeScalar(p, v.dtype(), v.intValue(), v.floatValue());
            temps.push_back(Tensor::view(v.dtype(), {}, std::shared_ptr<void>(std::shared_ptr<void>(), p)));
          } else {
            temps.push_back(tensorOf(v, what));
          }
          out[i] = &temps.back();
        }
      }
      return jit::CompiledKernel::TensorRefs(out, list.size);
    };
    jit::CompiledKernel::TensorRefs outSpan = refer(o.list<2>(), outOnStack, outMore, outs, "kernel output", false);
    jit::CompiledKernel::TensorRefs inSpan =
        refer(o.list<1>(), inOnStack, inMore, ins, "kernel input", outSpan.empty() || !outSpan[0]->device().isGpu());
    // A tuning log may give a kernel with `?` dimensions a variant per shape.
    const jit::CompiledKernel& kernel =
        kernels.on(k, outSpan.empty() ? Device{} : outSpan[0]->device()).variantFor(inSpan);
    uint64_t t0 = profiling_ ? nowNanos() : 0;
    // On a GPU the launch returns at once: events around it measure the kernel.
    device::CudaStream* timed = profiling_ && kernel.device().isGpu() ? &streams_->on(kernel.device()) : nullptr;
    if (timed) timed->timeBegin();
    // A constant weight reaches its GEMM packed once (runtime/kernel_table.h).
    const float* prepared[8];
    size_t numPrepared = std::min<size_t>(kernel.preparedInputs().size(), 8);
    if (numPrepared) kernels.prepared(k, kernel, inSpan, std::span<const float*>(prepared, numPrepared));
    kernel.run(inSpan, outSpan, std::span<const float* const>(prepared, numPrepared));
    if (timed) {
      timed->timeEnd(k);
      profile_[k].calls++;
      if (tracing_) trace_.push_back({"launch " + exe.kernels()[k].function->name, t0, nowNanos() - t0});
    } else if (profiling_) {
      recordKernel(k, t0);
    }
    if (recordingShapes_) [[unlikely]] {
      std::vector<Shape> shapes;
      for (const Tensor* t : inSpan) shapes.push_back(t->shape());
      KernelShapeProfile& byShape = profile_[k].byShape[jit::formatShapes(shapes)];
      byShape.calls++;
      if (!timed) byShape.totalNanos += nowNanos() - t0;
    }
    if (trace)
      for (const Tensor* t : inSpan) trace->read(*t);
    // Temporaries must not outlive the instruction.
    ins.clear();
    outs.clear();
    NEXT();
  }
  DISPATCH();
  CASE(InvokeScalar) {
    OPS(InvokeScalar);
    bytecode::RegisterList in = o.list<1>(), out = o.list<2>();
    const Value* inPtrs[16];
    Value* outPtrs[16];
    if (in.size > 16 || out.size > 16) throw Error("scalar kernel with too many operands");
    for (uint32_t i = 0; i < in.size; ++i) inPtrs[i] = &R[in[i]];
    // run() reads every input before writing any output, so outputs may alias inputs.
    for (uint32_t i = 0; i < out.size; ++i) outPtrs[i] = &R[out[i]];
    kernels.scalar(IDX(0))->run(inPtrs, outPtrs);
    NEXT();
  }
  DISPATCH();
  CASE(InvokeDynamic) {
    OPS(InvokeDynamic);
    uint32_t k = IDX(0);
    gatherInputs(R, o.list<1>());
    uint64_t t0 = profiling_ ? nowNanos() : 0;
    // Placement puts a kernel's operands and results on one device.
    Device device = ins.empty() ? Device{} : ins[0].device();
    Tensor out = vm::runDynamicKernel(*exe.kernels()[k].function, std::span<const Tensor>(ins.data(), ins.size()), *memory_, device);
    if (profiling_) recordKernel(k, t0);
    if (trace) {
      traceReads(ins);
      bool view = std::any_of(ins.begin(), ins.end(), [&](const Tensor& t) { return t.data() == out.data(); });
      if (!view) trace->birth(out);
    }
    ins.clear();
    R[o.list<2>()[0]] = Value(std::move(out));  // the verifier checked: one output
    NEXT();
  }
  DISPATCH();
  CASE(ShapeFunc) {
    OPS(ShapeFunc);
    const kernel_ir::FusedFunction& f = *exe.kernels()[IDX(0)].function;
    bytecode::RegisterList in = o.list<1>(), out = o.list<2>();
    boost::container::small_vector<Shape, 8> shapes;
    for (uint32_t i = 0; i < in.size; ++i) {
      const Value& v = R[in[i]];
      if (v.isScalar()) shapes.emplace_back();
      else shapes.push_back(tensorOf(v, "shape function input").shape());
    }
    std::vector<Shape> all = kernel_ir::computeShapes(f, std::span<const Shape>(shapes.data(), shapes.size()));
    for (uint32_t i = 0; i < out.size; ++i) R[out[i]] = Value(shapeTensor(dims(all[static_cast<size_t>(f.outputs[i])])));
    NEXT();
  }
  DISPATCH();
  CASE(AllocStorage) {
    OPS(AllocStorage);
    REG(0) = memory_->storage(o.wide<1>(), IDX(2), bytecode::decodeDevice(IDX(3)));
    NEXT();
  }
  DISPATCH();
  CASE(AllocStorageDyn) {
    OPS(AllocStorageDyn);
    Shape s = shapeFromTensor(REG(1));
    DType t = static_cast<DType>(IDX(2));
    REG(0) = memory_->storage(static_cast<uint64_t>(numElements(s)) * dtypeSize(t), 64, bytecode::decodeDevice(IDX(3)));
    NEXT();
  }
  DISPATCH();
  CASE(AllocTensor) {
    OPS(AllocTensor);
    const Value& st = REG(1);
    const Tensor& shape = exe.constants()[IDX(3)];
    const int64_t* p = shape.data<int64_t>();
    REG(0) = vm::placeTensor(st, o.wide<2>(), std::span<const int64_t>(p, static_cast<size_t>(shape.shape()[0])),
                             static_cast<DType>(IDX(4)));
    if (trace) trace->birth(REG(0).asTensorObject()->tensor);
    NEXT();
  }
  DISPATCH();
  CASE(AllocTensorOwn) {
    OPS(AllocTensorOwn);
    const Tensor& shapeConst = exe.constants()[IDX(1)];
    std::span<const int64_t> shape(shapeConst.data<int64_t>(), static_cast<size_t>(shapeConst.shape()[0]));
    DType dtype = static_cast<DType>(IDX(2));
    Device device = bytecode::decodeDevice(IDX(3));
    Value v;
    uint64_t bytes = dtypeSize(dtype);
    bool sized = true;
    for (int64_t d : shape) sized = sized && d >= 0 && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
    if (sized && device == Device{}) v = memory_->reuse(dtype, shape, bytes);
    if (v.empty()) v = Value(memory_->tensor(dtype, shape, device));
    REG(0) = std::move(v);
    if (trace) trace->birth(REG(0).asTensorObject()->tensor);
    NEXT();
  }
  DISPATCH();
  CASE(AllocTensorReg) {
    OPS(AllocTensorReg);
    const Value& st = REG(1);
    Shape s = shapeFromTensor(REG(3));
    REG(0) = vm::placeTensor(st, o.wide<2>(), dims(s), static_cast<DType>(IDX(4)));
    if (trace) trace->birth(REG(0).asTensorObject()->tensor);
    NEXT();
  }
  DISPATCH();
  CASE(AllocAdt) {
    OPS(AllocAdt);
    REG(0) = makeAdt(R, IDX(1), o.list<2>());
    NEXT();
  }
  DISPATCH();
  CASE(AllocTuple) {
    OPS(AllocTuple);
    REG(0) = makeAdt(R, kTupleCtor, o.list<1>());
    NEXT();
  }
  DISPATCH();
  CASE(AllocClosure) {
    OPS(AllocClosure);
    bytecode::RegisterList captured = o.list<2>();
    boost::container::small_vector<Value, 8> cap;
    for (uint32_t i = 0; i < captured.size; ++i) cap.push_back(TAKE(captured[i]));
    REG(0) = Value::closure(IDX(1), std::span<const Value>(cap.data(), cap.size()));
    NEXT();
  }
  DISPATCH();
  CASE(GetField) {
    OPS(GetField);
    Value v = fieldOf(REG(1), IDX(2), "get_field");  // copy first: the destination may hold the ADT itself
    REG(0) = std::move(v);
    NEXT();
  }
  DISPATCH();
  CASE(GetFieldView) {
    OPS(GetFieldView);
    REG(0).view(fieldOf(REG(1), IDX(2), "get_field_view"));
    NEXT();
  }
  DISPATCH();
  CASE(AllocRef) {
    OPS(AllocRef);
    REG(0) = Value::ref(REG(1));
    NEXT();
  }
  DISPATCH();
  CASE(RefRead) {
    OPS(RefRead);
    Value v = refOf(REG(1), "ref_read")->content;  // copy first: the destination may hold the cell itself
    REG(0) = std::move(v);
    NEXT();
  }
  DISPATCH();
  CASE(RefWrite) {
    OPS(RefWrite);
    refOf(REG(0), "ref_write")->content = REG(1);
    NEXT();
  }
  DISPATCH();
  CASE(GetTag) {
    OPS(GetTag);
    const AdtObject* a = adtOf(REG(1), "get_tag");
    REG(0) = Value::intScalar(DType::Int32, a->ctor);
    NEXT();
  }
  DISPATCH();
  CASE(BranchIfNot) {
    OPS(BranchIfNot);
    const Value& c = REG(0);
    bool t;
    if (c.isScalar()) {
      t = c.truthy();
    } else {
      Tensor ct = tensorOf(c, "condition");
      if (trace) trace->read(ct);
      if (ct.rank() != 0 || ct.device().kind != Device::Kind::CPU) throw Error("condition must be a host scalar, got " + c.describe());
      int64_t i = 0;
      double f = 0;
      readScalar(ct.data(), ct.dtype(), i, f);
      t = isFloat(ct.dtype()) ? f != 0 : i != 0;
    }
    if (!t && IDX(1) <= pc) STOP_POINT();  // a loop's way back
    pc = t ? pc + o.length() : IDX(1);
  }
  DISPATCH();
  CASE(BranchIfNotCtor) {
    OPS(BranchIfNotCtor);
    const AdtObject* a = adtOf(REG(0), "match");
    if (a->ctor != IDX(1) && IDX(2) <= pc) STOP_POINT();
    pc = a->ctor == IDX(1) ? pc + o.length() : IDX(2);
  }
  DISPATCH();
  CASE(Goto) {
    OPS(Goto);
    if (IDX(0) <= pc) STOP_POINT();
    pc = IDX(0);
  }
  DISPATCH();
  CASE(LoadConst) {
    OPS(LoadConst);
    REG(0) = IDX(2) == 0 ? constants_[IDX(1)] : constantOn(IDX(1), IDX(2));
    NEXT();
  }
  DISPATCH();
  CASE(LoadImm) {
    OPS(LoadImm);
    DType t = static_cast<DType>(IDX(1));
    uint64_t bits = o.wide<2>();
    if (isFloat(t)) {
      double d;
      std::memcpy(&d, &bits, 8);
      REG(0) = Value::floatScalar(t, d);
    } else {
      REG(0) = Value::intScalar(t, static_cast<int64_t>(bits));
    }
    NEXT();
  }
  DISPATCH();
  CASE(Fatal) {
    OPS(Fatal);
    throw Error(exe.strings()[IDX(0)]);
  }
  CASE(ShapeOf) {
    OPS(ShapeOf);
    const Value& v = REG(1);
    Value s = v.isScalar() ? Value(shapeTensor({})) : Value(shapeTensor(dims(tensorOf(v, "shape_of").shape())));
    REG(0) = std::move(s);
    NEXT();
  }
  DISPATCH();
  CASE(Reshape) {
    OPS(Reshape);
    Tensor t = tensorOf(REG(1), "reshape");
    Shape s = shapeFromTensor(REG(2));
    REG(0) = Value(t.reshaped(dims(s)));
    NEXT();
  }
  DISPATCH();
  CASE(DeviceCopy) {
    OPS(DeviceCopy);
    Value copy = memory_->copyValue(REG(1), bytecode::decodeDevice(IDX(3)));
    if (trace && REG(1).isObject(ObjectKind::Tensor) && copy.isObject(ObjectKind::Tensor)) {
      trace->read(REG(1).asTensorObject()->tensor);
      trace->birth(copy.asTensorObject()->tensor);
    }
    REG(0) = std::move(copy);
    NEXT();
  }
  DISPATCH();
  CASE(Release) {
    OPS(Release);
    if (!memory_->recycle(REG(0))) REG(0).reset();
    NEXT();
  }
  DISPATCH();

#if !defined(__GNUC__)
  }
#endif
done:
  if (trace) trace->finish(result);
  return result;
#undef OPS
#undef RUN_DEFERRED
#undef REG
#undef IDX
#undef NEXT
#undef STOP_POINT
#undef TAKE
#undef ENTERED
#undef DISPATCH
#undef CASE
}

}  // namespace kiln
