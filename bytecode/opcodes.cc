// The generic instruction decoder, driven by the operand strings of opcodes.def.
#include "bytecode/opcodes.h"

namespace kiln::bytecode {

std::optional<InstructionView> InstructionView::decode(std::span<const uint32_t> code, uint32_t pc) {
  if (pc >= code.size() || code[pc] >= kNumOpcodes) return std::nullopt;
  InstructionView v;
  v.op = static_cast<Opcode>(code[pc]);
  v.pc = pc;
  size_t at = pc + 1;
  for (char k : info(v.op).operands) {
    Operand o;
    o.kind = k;
    if (k == 'W') {
      if (at + 2 > code.size()) return std::nullopt;
      o.value64 = code[at] | static_cast<uint64_t>(code[at + 1]) << 32;
      at += 2;
    } else if (k == 'L' || k == 'M') {
      if (at >= code.size()) return std::nullopt;
      uint32_t n = code[at++];
      if (n > code.size() - at) return std::nullopt;
      o.value = n;
      o.list = code.subspan(at, n);
      at += n;
    } else {
      if (at >= code.size()) return std::nullopt;
      o.value = code[at++];
    }
    v.operands[v.numOperands++] = o;
  }
  v.length = static_cast<uint32_t>(at - pc);
  return v;
}

}  // namespace kiln::bytecode
