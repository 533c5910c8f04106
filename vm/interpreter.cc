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
#include "vm/memory_trace.h"
#include "vm/memory.h"
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

// The operands of the kernel instructions (layout "KLL": kernel, inputs, outputs).
struct KernelOperands {
  uint32_t kernel;
  const uint32_t* in;
  uint32_t nin;
  const uint32_t* out;
  uint32_t nout;
  uint32_t length;  // of the whole instruction, in words
};

KernelOperands kernelOperands(const uint32_t* insn) {
  KernelOperands o;
  o.kernel = insn[1];
  o.nin = insn[2];
  o.in = insn + 3;
  o.nout = insn[3 + o.nin];
  o.out = insn + 4 + o.nin;
  o.length = 4 + o.nin + o.nout;
  return o;
}

const AdtObject* adtOf(const Value& v, const char* what) {
  if (!v.isObject(ObjectKind::Adt)) throw Error(std::string(what) + ": expected a tuple or ADT value, got " + v.describe());
  return v.asAdt();
}

}  // namespace

Value VirtualMachine::run(uint32_t entry, std::span<const Value> args) {
  const Executable& exe = *exe_;
  const BytecodeFunction* fn = &exe.functions()[entry];
  if (regs_.size() < fn->frameSize) regs_.resize(std::max<size_t>(fn->frameSize, 256));
  for (size_t i = 0; i < args.size(); ++i) regs_[i] = args[i];
  frames_.push_back(Frame{entry, 0, 0, 0});

  const uint32_t* code = fn->code.data();
  uint32_t pc = 0;
  uint32_t base = 0;
  Value* R = regs_.data();
  Value result;

  // Small scratch lists for kernel operands (a kernel has few parameters).
  boost::container::small_vector<Tensor, 8> ins, outs;
  boost::container::small_vector<Value, 8> argTmp;
  vm::MemoryTrace* trace = memoryTrace_.get();  // null unless enableMemoryTrace()

#define OPERAND(k) code[pc + (k)]
#define REG(k) R[code[pc + (k)]]
// An `M` list entry: moved out when marked (the value's last use), else copied.
#define TAKE(k) (code[pc + (k)] & bytecode::kMoveBit ? std::move(R[code[pc + (k)] & ~bytecode::kMoveBit]) : Value(R[code[pc + (k)]]))

// A handler's locals live in its braces and DISPATCH() comes after them: a computed
// goto out of a scope does not run destructors, so it must leave none behind.
#if defined(__GNUC__)
  static void* const kLabels[] = {
#define KILN_OPCODE(name, mnemonic, operands, meaning) &&L_##name,
#include "bytecode/opcodes.def"
#undef KILN_OPCODE
  };
#define DISPATCH() goto* kLabels[code[pc]]
#define CASE(name) L_##name:
#else
#define DISPATCH() goto dispatch
#define CASE(name) case Opcode::name:
#endif

  // Enters `callee` with arguments already in argTmp; the caller resumes at `next`
  // and receives the result in register `dst`.
  auto enter = [&](uint32_t callee, uint32_t next, uint32_t dst) {
    if (frames_.size() >= options_.maxCallDepth)
      throw Error("recursion too deep (more than " + std::to_string(options_.maxCallDepth) + " nested calls)");
    frames_.back().returnPc = next;
    frames_.back().dst = dst;
    uint32_t newBase = base + fn->frameSize;
    const BytecodeFunction* cf = &exe.functions()[callee];
    if (regs_.size() < size_t(newBase) + cf->frameSize) regs_.resize((size_t(newBase) + cf->frameSize) * 2);
    Value* nr = regs_.data() + newBase;
    for (size_t i = 0; i < argTmp.size(); ++i) nr[i] = std::move(argTmp[i]);
    argTmp.clear();
    frames_.push_back(Frame{callee, 0, newBase, 0});
    fn = cf;
    code = cf->code.data();
    pc = 0;
    base = newBase;
    R = nr;
  };
  // Replaces the current frame by `callee` with the arguments in argTmp.
  auto reenter = [&](uint32_t callee) {
    const BytecodeFunction* cf = &exe.functions()[callee];
    for (uint32_t i = 0; i < fn->frameSize; ++i) R[i] = Value();
    if (regs_.size() < size_t(base) + cf->frameSize) {
      regs_.resize((size_t(base) + cf->frameSize) * 2);
      R = regs_.data() + base;
    }
    for (size_t i = 0; i < argTmp.size(); ++i) R[i] = std::move(argTmp[i]);
    argTmp.clear();
    frames_.back().function = callee;
    fn = cf;
    code = cf->code.data();
    pc = 0;
  };
  // Collects a closure's captured values and the listed registers into argTmp.
  auto closureArgs = [&](const Value& c, const uint32_t* list, uint32_t n) -> uint32_t {
    if (!c.isClosure()) throw Error("call of a value that is not a function: " + c.describe());
    const ClosureObject* clo = c.asClosure();
    const BytecodeFunction& cf = exe.functions()[clo->function];
    if (clo->size + n != cf.numParams)
      throw Error("closure of @" + cf.name + " called with " + std::to_string(n) + " arguments, expects " +
                  std::to_string(cf.numParams - clo->size));
    for (uint32_t i = 0; i < clo->size; ++i) argTmp.push_back(clo->captured()[i]);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t r = list[i];
      argTmp.push_back(r & bytecode::kMoveBit ? std::move(R[r & ~bytecode::kMoveBit]) : Value(R[r]));
    }
    return clo->function;
  };
  // The `M` list of n registers starting at operand `first`, taken in order.
  auto takeList = [&](uint32_t first, uint32_t n) {
    std::vector<Value> fields;
    fields.reserve(n);
    for (uint32_t i = 0; i < n; ++i) fields.push_back(TAKE(first + i));
    return fields;
  };
  auto traceReads = [&](const auto& ts) {
    for (const Tensor& t : ts) trace->read(t);
  };
  auto gatherInputs = [&](const uint32_t* list, uint32_t n) {
    ins.clear();
    for (uint32_t i = 0; i < n; ++i) ins.push_back(tensorOf(R[list[i]], "kernel input"));
  };
  auto recordKernel = [&](uint32_t k, uint64_t t0) {
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
    REG(1) = REG(2);
    pc += 3;
  }
  DISPATCH();
  CASE(Ret) {
    Value v = std::move(REG(1));
    for (uint32_t i = 0; i < fn->frameSize; ++i) R[i] = Value();
    frames_.pop_back();
    if (frames_.empty()) {
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
    uint32_t dst = OPERAND(1), callee = OPERAND(2), n = OPERAND(3);
    for (uint32_t i = 0; i < n; ++i) argTmp.push_back(TAKE(4 + i));
    enter(callee, pc + 4 + n, dst);
  }
  DISPATCH();
  CASE(TailCall) {
    uint32_t callee = OPERAND(1), n = OPERAND(2);
    for (uint32_t i = 0; i < n; ++i) argTmp.push_back(TAKE(3 + i));
    reenter(callee);
  }
  DISPATCH();
  CASE(InvokeClosure) {
    uint32_t dst = OPERAND(1), n = OPERAND(3);
    uint32_t callee = closureArgs(REG(2), &code[pc + 4], n);
    enter(callee, pc + 4 + n, dst);
  }
  DISPATCH();
  CASE(TailCallClosure) {
    uint32_t n = OPERAND(2);
    uint32_t callee = closureArgs(REG(1), &code[pc + 3], n);
    reenter(callee);
  }
  DISPATCH();
  CASE(InvokeKernel) {
    KernelOperands op = kernelOperands(&code[pc]);
    gatherInputs(op.in, op.nin);
    outs.clear();
    for (uint32_t i = 0; i < op.nout; ++i) outs.push_back(tensorOf(R[op.out[i]], "kernel output"));
    const jit::CompiledKernel& kernel = kernels.on(op.kernel, outs.empty() ? Device{} : outs[0].device());
    uint64_t t0 = profiling_ ? nowNanos() : 0;
    // On a GPU the launch returns at once: events around it measure the kernel.
    device::CudaStream* timed = profiling_ && kernel.device().kind == Device::Kind::CUDA ? &streams_->on(kernel.device()) : nullptr;
    if (timed) timed->timeBegin();
    kernel.run(std::span<const Tensor>(ins.data(), ins.size()), std::span<const Tensor>(outs.data(), outs.size()));
    if (timed) {
      timed->timeEnd(op.kernel);
      profile_[op.kernel].calls++;
      if (tracing_) trace_.push_back({"launch " + exe.kernels()[op.kernel].function->name, t0, nowNanos() - t0});
    } else if (profiling_) {
      recordKernel(op.kernel, t0);
    }
    if (trace) traceReads(ins);
    // The handles must not outlive the instruction: a released input dies now.
    ins.clear();
    outs.clear();
    pc += op.length;
  }
  DISPATCH();
  CASE(InvokeScalar) {
    KernelOperands op = kernelOperands(&code[pc]);
    const Value* inPtrs[16];
    Value* outPtrs[16];
    if (op.nin > 16 || op.nout > 16) throw Error("scalar kernel with too many operands");
    for (uint32_t i = 0; i < op.nin; ++i) inPtrs[i] = &R[op.in[i]];
    // run() reads every input before writing any output, so outputs may alias inputs.
    for (uint32_t i = 0; i < op.nout; ++i) outPtrs[i] = &R[op.out[i]];
    kernels.scalar(op.kernel)->run(inPtrs, outPtrs);
    pc += op.length;
  }
  DISPATCH();
  CASE(InvokeDynamic) {
    KernelOperands op = kernelOperands(&code[pc]);
    gatherInputs(op.in, op.nin);
    uint64_t t0 = profiling_ ? nowNanos() : 0;
    // Placement puts a kernel's operands and results on one device.
    Device device = ins.empty() ? Device{} : ins[0].device();
    Tensor out = vm::runDynamicKernel(*exe.kernels()[op.kernel].function, std::span<const Tensor>(ins.data(), ins.size()), *memory_, device);
    if (profiling_) recordKernel(op.kernel, t0);
    if (trace) {
      traceReads(ins);
      bool view = std::any_of(ins.begin(), ins.end(), [&](const Tensor& t) { return t.data() == out.data(); });
      if (!view) trace->birth(out);
    }
    ins.clear();
    R[op.out[0]] = Value(std::move(out));  // the verifier checked: one output
    pc += op.length;
  }
  DISPATCH();
  CASE(ShapeFunc) {
    KernelOperands op = kernelOperands(&code[pc]);
    const kernel_ir::FusedFunction& f = *exe.kernels()[op.kernel].function;
    boost::container::small_vector<Shape, 8> shapes;
    for (uint32_t i = 0; i < op.nin; ++i) {
      const Value& v = R[op.in[i]];
      if (v.isScalar()) shapes.emplace_back();
      else shapes.push_back(tensorOf(v, "shape function input").shape());
    }
    std::vector<Shape> all = kernel_ir::computeShapes(f, std::span<const Shape>(shapes.data(), shapes.size()));
    for (uint32_t i = 0; i < op.nout; ++i) R[op.out[i]] = Value(shapeTensor(dims(all[static_cast<size_t>(f.outputs[i])])));
    pc += op.length;
  }
  DISPATCH();
  CASE(AllocStorage) {
    uint64_t bytes = OPERAND(2) | static_cast<uint64_t>(OPERAND(3)) << 32;
    REG(1) = memory_->storage(bytes, OPERAND(4), bytecode::decodeDevice(OPERAND(5)));
    pc += 6;
  }
  DISPATCH();
  CASE(AllocStorageDyn) {
    Shape s = shapeFromTensor(REG(2));
    DType t = static_cast<DType>(OPERAND(3));
    REG(1) = memory_->storage(static_cast<uint64_t>(numElements(s)) * dtypeSize(t), 64, bytecode::decodeDevice(OPERAND(4)));
    pc += 5;
  }
  DISPATCH();
  CASE(AllocTensor) {
    const Value& st = REG(2);
    uint64_t offset = OPERAND(3) | static_cast<uint64_t>(OPERAND(4)) << 32;
    const Tensor& shape = exe.constants()[OPERAND(5)];
    const int64_t* p = shape.data<int64_t>();
    REG(1) = vm::placeTensor(st, offset, std::span<const int64_t>(p, static_cast<size_t>(shape.shape()[0])),
                             static_cast<DType>(OPERAND(6)));
    if (trace) trace->birth(REG(1).asTensorObject()->tensor);
    pc += 7;
  }
  DISPATCH();
  CASE(AllocTensorReg) {
    const Value& st = REG(2);
    uint64_t offset = OPERAND(3) | static_cast<uint64_t>(OPERAND(4)) << 32;
    Shape s = shapeFromTensor(REG(5));
    REG(1) = vm::placeTensor(st, offset, dims(s), static_cast<DType>(OPERAND(6)));
    if (trace) trace->birth(REG(1).asTensorObject()->tensor);
    pc += 7;
  }
  DISPATCH();
  CASE(AllocAdt) {
    uint32_t n = OPERAND(3);
    REG(1) = Value::adt(OPERAND(2), takeList(4, n));
    pc += 4 + n;
  }
  DISPATCH();
  CASE(AllocTuple) {
    uint32_t n = OPERAND(2);
    REG(1) = Value::tuple(takeList(3, n));
    pc += 3 + n;
  }
  DISPATCH();
  CASE(AllocClosure) {
    uint32_t n = OPERAND(3);
    boost::container::small_vector<Value, 8> cap;
    for (uint32_t i = 0; i < n; ++i) cap.push_back(TAKE(4 + i));
    REG(1) = Value::closure(OPERAND(2), std::span<const Value>(cap.data(), cap.size()));
    pc += 4 + n;
  }
  DISPATCH();
  CASE(GetField) {
    const AdtObject* a = adtOf(REG(2), "get_field");
    uint32_t i = OPERAND(3);
    if (i >= a->size) throw Error("field " + std::to_string(i) + " of a value with " + std::to_string(a->size) + " fields");
    Value v = a->fields()[i];  // copy first: the destination may hold the ADT itself
    REG(1) = std::move(v);
    pc += 4;
  }
  DISPATCH();
  CASE(GetTag) {
    const AdtObject* a = adtOf(REG(2), "get_tag");
    REG(1) = Value::intScalar(DType::Int32, a->ctor);
    pc += 3;
  }
  DISPATCH();
  CASE(BranchIfNot) {
    const Value& c = REG(1);
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
    pc = t ? pc + 3 : OPERAND(2);
  }
  DISPATCH();
  CASE(BranchIfNotCtor) {
    const AdtObject* a = adtOf(REG(1), "match");
    pc = a->ctor == OPERAND(2) ? pc + 4 : OPERAND(3);
  }
  DISPATCH();
  CASE(Goto) {
    pc = OPERAND(1);
  }
  DISPATCH();
  CASE(LoadConst) {
    REG(1) = OPERAND(3) == 0 ? constants_[OPERAND(2)] : constantOn(OPERAND(2), OPERAND(3));
    pc += 4;
  }
  DISPATCH();
  CASE(LoadImm) {
    DType t = static_cast<DType>(OPERAND(2));
    uint64_t bits = OPERAND(3) | static_cast<uint64_t>(OPERAND(4)) << 32;
    if (isFloat(t)) {
      double d;
      std::memcpy(&d, &bits, 8);
      REG(1) = Value::floatScalar(t, d);
    } else {
      REG(1) = Value::intScalar(t, static_cast<int64_t>(bits));
    }
    pc += 5;
  }
  DISPATCH();
  CASE(Fatal) {
    throw Error(exe.strings()[OPERAND(1)]);
  }
  CASE(ShapeOf) {
    const Value& v = REG(2);
    Value s = v.isScalar() ? Value(shapeTensor({})) : Value(shapeTensor(dims(tensorOf(v, "shape_of").shape())));
    REG(1) = std::move(s);
    pc += 3;
  }
  DISPATCH();
  CASE(Reshape) {
    Tensor t = tensorOf(REG(2), "reshape");
    Shape s = shapeFromTensor(REG(3));
    REG(1) = Value(t.reshaped(dims(s)));
    pc += 4;
  }
  DISPATCH();
  CASE(DeviceCopy) {
    Value copy = memory_->copyValue(REG(2), bytecode::decodeDevice(OPERAND(4)));
    if (trace && REG(2).isObject(ObjectKind::Tensor) && copy.isObject(ObjectKind::Tensor)) {
      trace->read(REG(2).asTensorObject()->tensor);
      trace->birth(copy.asTensorObject()->tensor);
    }
    REG(1) = std::move(copy);
    pc += 5;
  }
  DISPATCH();
  CASE(Release) {
    REG(1) = Value();
    pc += 2;
  }
  DISPATCH();

#if !defined(__GNUC__)
  }
#endif
done:
  if (trace) trace->finish(result);
  return result;
#undef OPERAND
#undef REG
#undef TAKE
#undef DISPATCH
#undef CASE
}

}  // namespace kiln
