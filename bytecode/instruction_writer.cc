// InstructionWriter: table-checked instruction encoding.
#include "bytecode/instruction_writer.h"

#include <string>

#include "kiln/error.h"

namespace kiln::bytecode {

namespace {
[[noreturn]] void mismatch(Opcode op, const std::string& what) {
  throw Error("internal: " + std::string(info(op).mnemonic) + " written against its table row (" +
              std::string(info(op).operands) + "): " + what);
}
}  // namespace

uint32_t InstructionWriter::emit(Opcode op, std::span<const Arg> args) {
  std::string_view kinds = info(op).operands;
  if (args.size() != kinds.size())
    mismatch(op, std::to_string(args.size()) + " operands for " + std::to_string(kinds.size()));
  uint32_t at = size();
  // A refused instruction leaves nothing behind.
  auto fail = [&](const std::string& what) {
    code_.resize(at);
    mismatch(op, what);
  };
  code_.push_back(static_cast<uint32_t>(op));
  size_t k = 0;
  for (const Arg& a : args) {
    char kind = kinds[k++];
    bool list = isListKind(kind);
    if (a.isList != list) fail("operand " + std::to_string(k - 1) + (list ? " must be a list" : " must not be a list"));
    if (list) {
      code_.push_back(static_cast<uint32_t>(a.list.size()));
      code_.insert(code_.end(), a.list.begin(), a.list.end());
    } else if (kind == 'W') {
      code_.push_back(static_cast<uint32_t>(a.value));
      code_.push_back(static_cast<uint32_t>(a.value >> 32));
    } else {
      if (a.value > UINT32_MAX) fail("operand " + std::to_string(k - 1) + " does not fit 32 bits");
      code_.push_back(static_cast<uint32_t>(a.value));
    }
  }
  return at;
}

uint32_t InstructionWriter::emitWords(Opcode op, std::initializer_list<uint64_t> values) {
  std::vector<Arg> args;
  args.reserve(values.size());
  for (uint64_t v : values) args.push_back(word(v));
  return emit(op, args);
}

std::vector<uint32_t> InstructionWriter::jumpWords(uint32_t pc) const {
  auto in = InstructionView::decode(code_, pc);
  if (!in) throw Error("internal: no instruction at " + std::to_string(pc));
  std::vector<uint32_t> out;
  for (uint32_t w : in->jumpOperandWords()) out.push_back(pc + w);
  return out;
}

}  // namespace kiln::bytecode
