// InstructionWriter: encodes instructions as bytecode/opcodes.def lays them out,
// for the compiler's emitter and for tests. Every instruction is checked against
// its table row (operand count, a list where the table has L or M, a one-word
// value where it has a one-word kind), so the emitter cannot write a layout the
// VM and the verifier read differently; a mismatch is an internal kiln::Error.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "bytecode/opcodes.h"

namespace kiln::bytecode {

class InstructionWriter {
 public:
  // One operand in table order: a value (64 bits for W, else 32) or a register list.
  struct Arg {
    uint64_t value = 0;
    std::vector<uint32_t> list;
    bool isList = false;
  };
  static Arg word(uint64_t v) { return Arg{v, {}, false}; }
  static Arg regs(std::vector<uint32_t> rs) { return Arg{0, std::move(rs), true}; }

  // Appends `op`; returns the position of its opcode word.
  uint32_t emit(Opcode op, std::span<const Arg> args);
  uint32_t emit(Opcode op, std::initializer_list<Arg> args) { return emit(op, std::span<const Arg>(args.begin(), args.size())); }
  // Appends `op` whose operands are all single values (no lists).
  uint32_t emitWords(Opcode op, std::initializer_list<uint64_t> values);
  // The word positions of the J operands of the instruction at `pc` (to patch).
  std::vector<uint32_t> jumpWords(uint32_t pc) const;

  uint32_t size() const { return static_cast<uint32_t>(code_.size()); }
  uint32_t& operator[](uint32_t at) { return code_.at(at); }
  std::vector<uint32_t> take() { return std::move(code_); }
  // Drops the instructions from word `at` (an instruction start) on.
  void truncate(uint32_t at) { code_.resize(std::min<size_t>(at, code_.size())); }

 private:
  std::vector<uint32_t> code_;
};

}  // namespace kiln::bytecode
