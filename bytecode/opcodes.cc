// The generic instruction decoder and instruction lengths, driven by opcodes.def.
#include "bytecode/opcodes.h"

#include "bytecode/operands.h"

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
    } else if (isListKind(k)) {
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
    o.word = static_cast<uint32_t>(at - pc) - (k == 'W' ? 2 : isListKind(k) ? 1 + o.value : 1);
    v.operands[v.numOperands++] = o;
  }
  v.length = static_cast<uint32_t>(at - pc);
  return v;
}

std::vector<uint32_t> InstructionView::destinations() const {
  std::vector<uint32_t> out;
  int lastList = -1;
  for (uint32_t k = 0; k < numOperands; ++k) {
    if (operands[k].kind == 'D') out.push_back(operands[k].value);
    if (isListKind(operands[k].kind)) lastList = static_cast<int>(k);
  }
  if (info(op).writesLastList() && lastList >= 0)
    for (uint32_t r : operands[lastList].list) out.push_back(listRegister(r));
  return out;
}

std::vector<uint32_t> InstructionView::jumpOperandWords() const {
  std::vector<uint32_t> out;
  for (uint32_t k = 0; k < numOperands; ++k)
    if (operands[k].kind == 'J') out.push_back(operands[k].word);
  return out;
}

uint32_t instructionLength(const uint32_t* insn) {
  switch (static_cast<Opcode>(insn[0])) {
#define KILN_OPCODE(name, mnemonic, operands, flags, meaning) \
  case Opcode::name: return Operands<Opcode::name>(insn).length();
#include "bytecode/opcodes.def"
#undef KILN_OPCODE
  }
  return 1;
}

}  // namespace kiln::bytecode
