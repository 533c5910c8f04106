// The disassembler: one line per instruction, operands named after the table's
// operand kinds (r3, @fn, kernel names, constructors, jump targets).
#include <cstring>

#include "bytecode/opcodes.h"
#include "kernel_ir/fused_function.h"
#include "kiln/executable.h"

namespace kiln {

using bytecode::InstructionView;
using bytecode::Operand;

namespace {

std::string operandText(const Executable& exe, const Operand& o) {
  auto num = [](uint64_t v) { return std::to_string(v); };
  switch (o.kind) {
    case 'D':
    case 'R': return "r" + num(o.value);
    case 'L': {
      std::string s = "[";
      for (size_t i = 0; i < o.list.size(); ++i) s += (i ? " r" : "r") + num(o.list[i]);
      return s + "]";
    }
    case 'M':
    case 'B': {  // a moved register prints as ^rN, a view as &rN
      std::string s = "[";
      for (size_t i = 0; i < o.list.size(); ++i) {
        uint32_t e = o.list[i];
        const char* mark = e & bytecode::kMoveBit ? "^r" : e & bytecode::kViewBit ? "&r" : "r";
        s += (i ? " " : "") + std::string(mark) + num(bytecode::listRegister(e));
      }
      return s + "]";
    }
    case 'F': return "@" + (o.value < exe.functions().size() ? exe.functions()[o.value].name : num(o.value));
    case 'K': return "k" + num(o.value) + (o.value < exe.kernels().size() ? ":" + exe.kernels()[o.value].function->name : "");
    case 'C': return "c" + num(o.value);
    case 'S': return "s" + num(o.value);
    case 'A': return exe.constructorName(o.value);
    case 'J': return "->" + num(o.value);
    case 'T': return o.value < static_cast<uint32_t>(kNumDTypes) ? std::string(dtypeName(static_cast<DType>(o.value))) : "?";
    case 'V': return bytecode::decodeDevice(o.value).toString();
    case 'W': return num(o.value64);
    default: return num(o.value);
  }
}

}  // namespace

std::string Executable::disassemble(uint32_t fi) const {
  const BytecodeFunction& f = c_.functions.at(fi);
  std::string out = "def @" + f.name + "(";
  for (size_t i = 0; i < f.numParams; ++i) out += (i ? ", r" : "r") + std::to_string(i);
  out += ")  // " + std::to_string(f.frameSize) + " registers\n";
  for (uint32_t pc = 0; pc < f.code.size();) {
    auto in = InstructionView::decode(f.code, pc);
    if (!in) {
      out += "  <undecodable word " + std::to_string(f.code[pc]) + ">\n";
      break;
    }
    char head[32];
    std::snprintf(head, sizeof head, "  %4u  ", pc);
    out += head;
    out += bytecode::info(in->op).mnemonic;
    for (uint32_t k = 0; k < in->numOperands; ++k) {
      const Operand& o = in->operands[k];
      out += k ? ", " : " ";
      if (in->op == bytecode::Opcode::LoadImm && o.kind == 'W') {
        DType t = static_cast<DType>(in->operands[1].value);
        if (isFloat(t)) {
          double d;
          std::memcpy(&d, &o.value64, sizeof d);
          out += std::to_string(d);
        } else {
          out += std::to_string(static_cast<int64_t>(o.value64));
        }
      } else {
        out += operandText(*this, o);
      }
    }
    if (in->op == bytecode::Opcode::Fatal && in->operands[0].value < c_.strings.size())
      out += "  // " + c_.strings[in->operands[0].value];
    out += "\n";
    pc += in->length;
  }
  return out;
}

std::string Executable::disassemble() const {
  std::string out;
  for (uint32_t i = 0; i < c_.functions.size(); ++i) out += disassemble(i) + "\n";
  out += "kernels:\n";
  for (size_t k = 0; k < kernels_.size(); ++k) {
    const char* kind = kernels_[k].kind == KernelKind::Scalar ? " (host scalar)" : kernels_[k].kind == KernelKind::Dynamic ? " (data-dependent)" : "";
    out += "  k" + std::to_string(k) + kind + ": " + kernels_[k].function->toString() + "\n";
  }
  return out;
}

}  // namespace kiln
