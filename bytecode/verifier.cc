// The loader's verifier: every instruction of every function is checked before
// anything runs, so the interpreter may trust operand bounds.
//
// Checked: opcodes; that operands lie inside the code; register indexes against the
// frame size; jump targets land on instruction starts; indexes into functions,
// kernels, constants, strings and constructors; call, kernel and constructor
// arities; device operands name the executable's devices; that control never
// runs off the end of a function; that a fork calls a pure function and is
// followed, in straight-line code no jump enters, only by invokes of pure
// functions and releases up to the join of its register, which nothing between
// reads or writes; that every join has its fork; that a `B` list never both
// views and moves a register; and that every get_field_view reads a stable
// register (stableRegisters below). Value kinds in
// registers (a tensor where a tuple is expected) are checked by the VM when used.
#include "bytecode/verifier.h"

#include <algorithm>
#include <string>
#include <vector>

#include "bytecode/opcodes.h"
#include "kernel_ir/fused_function.h"
#include "kiln/error.h"

namespace kiln::bytecode {

namespace {

[[noreturn]] void fail(const BytecodeFunction& f, uint32_t pc, const std::string& what) {
  throw Error("invalid executable: function '" + f.name + "' at " + std::to_string(pc) + ": " + what);
}

// Stable registers: those that hold one value from the function's entry to its
// end, so that a view of a field of that value (get_field_view) lives no longer
// than the value. A parameter is stable when no instruction writes it; another
// register when only get_field_view of a stable register writes it (it then
// holds nothing or a view into the stable value, and an ADT value's fields
// never change); and neither is ever released or moved out, except by the
// terminator that ends the frame (a tail call gathers its arguments, owning
// views, before the frame is cleared). Flow-insensitive: the emitter gives a
// view a register of its own for the whole function.
std::vector<bool> stableRegisters(const BytecodeFunction& f, const std::vector<InstructionView>& insns) {
  std::vector<bool> stable(f.frameSize, true);
  for (const InstructionView& in : insns) {
    bool view = in.op == Opcode::GetFieldView;
    for (uint32_t r : in.destinations())
      if (!view || r < f.numParams) stable[r] = false;
    if (in.op == Opcode::Release) stable[in.operands[0].value] = false;
    if (isTerminator(in.op)) continue;
    for (uint32_t k = 0; k < in.numOperands; ++k)
      if (isListKind(in.operands[k].kind))
        for (uint32_t e : in.operands[k].list)
          if (e & kMoveBit) stable[listRegister(e)] = false;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const InstructionView& in : insns) {
      if (in.op != Opcode::GetFieldView) continue;
      uint32_t dst = in.operands[0].value, src = in.operands[1].value;
      if (stable[dst] && !stable[src]) {
        stable[dst] = false;
        changed = true;
      }
    }
  }
  return stable;
}

// Fork at insns[i]: straight-line code of invokes (of pure functions) and
// releases up to the join of its register, which nothing between touches, and
// no jump into it. Returns the join's index.
size_t checkFork(const BytecodeFunction& f, const std::vector<InstructionView>& insns, size_t i,
                 const std::vector<bool>& jumpedTo, const std::vector<bool>& pure) {
  const InstructionView& fork = insns[i];
  uint32_t r = fork.operands[0].value;
  if (!pure[fork.operands[1].value]) fail(f, fork.pc, "fork of a function that is not pure");
  auto touches = [r](const Operand& o) {
    if (o.kind == 'D' || o.kind == 'R') return o.value == r;
    if (isListKind(o.kind))
      for (uint32_t x : o.list)
        if (listRegister(x) == r) return true;
    return false;
  };
  for (size_t j = i + 1; j < insns.size(); ++j) {
    const InstructionView& in = insns[j];
    if (jumpedTo[in.pc]) fail(f, in.pc, "a jump lands between a fork and its join");
    if (in.op == Opcode::Join && in.operands[0].value == r) return j;
    if (isTerminator(in.op)) break;
    bool ok = in.op == Opcode::Invoke ? pure[in.operands[1].value] : in.op == Opcode::Release;
    for (uint32_t k = 0; ok && k < in.numOperands; ++k) ok = !touches(in.operands[k]);
    if (!ok) fail(f, in.pc, "between a fork and its join only invokes of pure functions and releases, not touching its register");
  }
  fail(f, fork.pc, "fork without a join");
}

void verifyFunction(const Executable& exe, const BytecodeFunction& f, const std::vector<bool>& pure) {
  if (f.numParams > f.frameSize) fail(f, 0, "more parameters than registers");
  if (f.frameSize > (1u << 20)) fail(f, 0, "frame too large");
  if (f.paramNames.size() != f.numParams || f.paramTypes.size() != f.numParams)
    fail(f, 0, "parameter names or types do not match the parameter count");
  if (f.code.empty()) fail(f, 0, "empty function");
  std::vector<InstructionView> insns;
  std::vector<bool> starts(f.code.size() + 1, false);
  for (uint32_t pc = 0; pc < f.code.size();) {
    auto v = InstructionView::decode(f.code, pc);
    if (!v) fail(f, pc, f.code[pc] >= kNumOpcodes ? "unknown opcode " + std::to_string(f.code[pc]) : "truncated instruction");
    starts[pc] = true;
    insns.push_back(*v);
    pc += v->length;
  }
  if (!isTerminator(insns.back().op)) fail(f, insns.back().pc, "control runs off the end of the function");

  auto reg = [&](const InstructionView& in, uint32_t r) {
    if (r >= f.frameSize) fail(f, in.pc, "register " + std::to_string(r) + " is outside the frame of " + std::to_string(f.frameSize));
  };
  for (const InstructionView& in : insns) {
    for (uint32_t k = 0; k < in.numOperands; ++k) {
      const Operand& o = in.operands[k];
      switch (o.kind) {
        case 'D':
        case 'R': reg(in, o.value); break;
        case 'L':
          for (uint32_t r : o.list) reg(in, r);
          break;
        case 'M':
          for (uint32_t r : o.list) reg(in, r & ~kMoveBit);
          break;
        case 'B': {
          // A register passed as a view must keep its value through the call:
          // the same list moving it out would hand the callee its only owner.
          std::vector<uint32_t> viewed, moved;
          for (uint32_t e : o.list) {
            if ((e & kMoveBit) && (e & kViewBit)) fail(f, in.pc, "a list entry both moved and viewed");
            reg(in, listRegister(e));
            if (e & kViewBit) viewed.push_back(listRegister(e));
            if (e & kMoveBit) moved.push_back(listRegister(e));
          }
          for (uint32_t r : viewed)
            if (std::find(moved.begin(), moved.end(), r) != moved.end())
              fail(f, in.pc, "register " + std::to_string(r) + " passed as a view and moved in the same call");
          break;
        }
        case 'F':
          if (o.value >= exe.functions().size()) fail(f, in.pc, "function index out of range");
          break;
        case 'K':
          if (o.value >= exe.kernels().size()) fail(f, in.pc, "kernel index out of range");
          break;
        case 'C':
          if (o.value >= exe.constants().size()) fail(f, in.pc, "constant index out of range");
          break;
        case 'S':
          if (o.value >= exe.strings().size()) fail(f, in.pc, "string index out of range");
          break;
        case 'A':
          if (o.value >= exe.constructors().size()) fail(f, in.pc, "constructor id out of range");
          break;
        case 'J':
          if (o.value >= f.code.size() || !starts[o.value]) fail(f, in.pc, "jump target is not an instruction");
          break;
        case 'T':
          if (o.value >= static_cast<uint32_t>(kNumDTypes)) fail(f, in.pc, "bad dtype");
          break;
        case 'V': {
          // Only the devices the executable was compiled for (and the host).
          Device d = decodeDevice(o.value);
          bool listed = validDeviceWord(o.value) &&
                        (d == Device{} || std::find(exe.devices().begin(), exe.devices().end(), d) != exe.devices().end());
          if (!listed) fail(f, in.pc, "device operand is not one of the executable's devices");
          break;
        }
        default: break;
      }
    }
    const Operand* ops = in.operands;
    auto kernelArity = [&](uint32_t k, size_t ins, size_t outs, const char* what) {
      const auto& fn = *exe.kernels()[k].function;
      if (ins != fn.params.size() || outs != fn.outputs.size())
        fail(f, in.pc, std::string(what) + " passes " + std::to_string(ins) + " inputs and " + std::to_string(outs) +
                           " outputs to kernel '" + fn.name + "', which has " + std::to_string(fn.params.size()) +
                           " and " + std::to_string(fn.outputs.size()));
    };
    switch (in.op) {
      case Opcode::Invoke:
      case Opcode::Fork:
      case Opcode::TailCall: {
        uint32_t fi = ops[in.op == Opcode::TailCall ? 0 : 1].value;
        uint32_t n = ops[in.op == Opcode::TailCall ? 1 : 2].value;
        if (n != exe.functions()[fi].numParams)
          fail(f, in.pc, "calls '" + exe.functions()[fi].name + "' with " + std::to_string(n) + " arguments, not " +
                             std::to_string(exe.functions()[fi].numParams));
        break;
      }
      case Opcode::AllocClosure:
        if (ops[2].value > exe.functions()[ops[1].value].numParams) fail(f, in.pc, "closure captures more values than its function has parameters");
        break;
      case Opcode::AllocAdt:
        if (ops[2].value != exe.constructors()[ops[1].value].arity) fail(f, in.pc, "wrong number of constructor fields");
        break;
      case Opcode::BranchIfNotCtor: break;
      case Opcode::InvokeKernel:
      case Opcode::ShapeFunc:
        if (exe.kernels()[ops[0].value].kind == KernelKind::Dynamic && in.op == Opcode::InvokeKernel)
          fail(f, in.pc, "invoke_kernel of a data-dependent kernel");
        kernelArity(ops[0].value, ops[1].value, ops[2].value, info(in.op).mnemonic.data());
        break;
      case Opcode::InvokeScalar:
        if (exe.kernels()[ops[0].value].kind != KernelKind::Scalar) fail(f, in.pc, "invoke_scalar of a kernel that is not scalar");
        kernelArity(ops[0].value, ops[1].value, ops[2].value, "invoke_scalar");
        break;
      case Opcode::InvokeDynamic:
        if (exe.kernels()[ops[0].value].kind != KernelKind::Dynamic) fail(f, in.pc, "invoke_dynamic of a kernel that is not data-dependent");
        kernelArity(ops[0].value, ops[1].value, ops[2].value, "invoke_dynamic");
        break;
      case Opcode::AllocStorage:
        if (ops[2].value == 0 || (ops[2].value & (ops[2].value - 1)) || ops[2].value > 4096) fail(f, in.pc, "bad alignment");
        if (ops[1].value64 > (uint64_t(1) << 48)) fail(f, in.pc, "storage size out of range");
        break;
      case Opcode::AllocTensor:
        if (exe.constants()[ops[3].value].rank() != 1 || exe.constants()[ops[3].value].dtype() != DType::Int64)
          fail(f, in.pc, "alloc_tensor shape constant is not an int64 vector");
        break;
      case Opcode::AllocTensorOwn: {
        const Tensor& shape = exe.constants()[ops[1].value];
        if (shape.rank() != 1 || shape.dtype() != DType::Int64)
          fail(f, in.pc, "alloc_tensor_own shape constant is not an int64 vector");
        // The block's size, as alloc_storage's is: every dimension >= 0, at most 2^48 bytes.
        uint64_t bytes = dtypeSize(static_cast<DType>(ops[2].value));
        for (int64_t i = 0; i < shape.shape()[0]; ++i) {
          int64_t d = shape.data<int64_t>()[i];
          if (d < 0) fail(f, in.pc, "alloc_tensor_own: negative dimension");
          if (d != 0 && bytes > (uint64_t(1) << 48) / static_cast<uint64_t>(d)) fail(f, in.pc, "alloc_tensor_own: size out of range");
          bytes *= static_cast<uint64_t>(d);
        }
        break;
      }
      default: break;
    }
  }
  std::vector<bool> stable = stableRegisters(f, insns);
  for (const InstructionView& in : insns)
    if (in.op == Opcode::GetFieldView && !stable[in.operands[1].value])
      fail(f, in.pc, "get_field_view of register " + std::to_string(in.operands[1].value) +
                         ", which is written, released or moved out in the function: the view could outlive the value");
  // Forks and joins pair up.
  std::vector<bool> jumpedTo(f.code.size() + 1, false);
  for (const InstructionView& in : insns)
    for (uint32_t k = 0; k < in.numOperands; ++k)
      if (in.operands[k].kind == 'J') jumpedTo[in.operands[k].value] = true;
  std::vector<bool> joined(insns.size(), false);
  for (size_t i = 0; i < insns.size(); ++i)
    if (insns[i].op == Opcode::Fork) joined[checkFork(f, insns, i, jumpedTo, pure)] = true;
  for (size_t i = 0; i < insns.size(); ++i)
    if (insns[i].op == Opcode::Join && !joined[i]) fail(f, insns[i].pc, "join without a fork");
}

}  // namespace

std::vector<bool> pureFunctions(const Executable& exe) {
  const auto& fns = exe.functions();
  std::vector<bool> pure(fns.size(), true);
  std::vector<std::vector<uint32_t>> callees(fns.size());
  for (size_t fi = 0; fi < fns.size(); ++fi) {
    const std::vector<uint32_t>& code = fns[fi].code;
    for (uint32_t pc = 0; pc < code.size();) {
      auto v = InstructionView::decode(code, pc);
      if (!v) break;  // verify() says why
      switch (v->op) {
        case Opcode::AllocRef:
        case Opcode::RefRead:
        case Opcode::RefWrite:
        case Opcode::InvokeClosure:
        case Opcode::TailCallClosure:
        case Opcode::DeviceCopy: pure[fi] = false; break;
        case Opcode::Invoke:
        case Opcode::Fork:
          if (v->operands[1].value < fns.size()) callees[fi].push_back(v->operands[1].value);
          break;
        case Opcode::TailCall:
          if (v->operands[0].value < fns.size()) callees[fi].push_back(v->operands[0].value);
          break;
        default: break;
      }
      pc += v->length;
    }
  }
  // Impurity spreads to callers until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t fi = 0; fi < fns.size(); ++fi)
      if (pure[fi])
        for (uint32_t c : callees[fi])
          if (!pure[c]) {
            pure[fi] = false;
            changed = true;
            break;
          }
  }
  return pure;
}

void verifyKernels(const Executable& exe) {
  for (const auto& k : exe.kernels()) {
    if (!k.function) throw Error("invalid executable: missing kernel");
    k.function->verify();
  }
}

void verify(const Executable& exe) {
  for (const auto& c : exe.constructors())
    if (c.arity > (1u << 16)) throw Error("invalid executable: constructor '" + c.name + "' has too many fields");
  std::vector<bool> pure = pureFunctions(exe);
  for (const auto& f : exe.functions()) verifyFunction(exe, f, pure);
}

}  // namespace kiln::bytecode
