// Typed operand views, generated at compile time from bytecode/opcodes.def.
//
// Operands<Opcode::X> reads instruction X in place. Its accessors are indexed by
// operand position (as in the table, from 0) and typed by the operand's kind
// letter, checked at compile time: reg<k>() for D and R, index<k>() for the
// one-word kinds (F K C S A J I T V), wide<k>() for W, list<k>() for L, M and B.
// An operand's word offset is a constant unless a list precedes it; then it is
// the constant plus the lengths of those lists. length() is the instruction's
// length, a constant for opcodes without lists. Nothing here is written per
// opcode: a new row in the table gets its view, its length and its offsets.
//
// The VM's handlers read operands only through these views; the generic
// InstructionView (bytecode/opcodes.h) serves the verifier and the disassembler,
// and InstructionWriter (bytecode/instruction_writer.h) encodes for the emitter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "bytecode/opcodes.h"

namespace kiln::bytecode {

template <Opcode op>
struct OperandLayout {
  static constexpr std::string_view kinds = info(op).operands;
  static constexpr size_t count = kinds.size();
  static constexpr bool fixed = !info(op).hasList();
  template <size_t k>
  static constexpr char kind() {
    static_assert(k < count, "operand index past the opcode's operands");
    return kinds[k];
  }

  // Word offset of operand k (k == count: the instruction's length).
  template <size_t k>
  static uint32_t offset(const uint32_t* insn) {
    if constexpr (k == 0) {
      return 1;
    } else {
      constexpr char prev = kinds[k - 1];
      uint32_t at = offset<k - 1>(insn);
      if constexpr (prev == 'W') return at + 2;
      else if constexpr (isListKind(prev)) return at + 1 + insn[at];
      else return at + 1;
    }
  }
};

// A register list in place: n entries (M and B entries may carry kMoveBit, B
// entries kViewBit instead).
struct RegisterList {
  const uint32_t* regs;
  uint32_t size;
  uint32_t operator[](uint32_t i) const { return regs[i]; }
};

template <Opcode op>
class Operands {
  using Layout = OperandLayout<op>;

 public:
  explicit Operands(const uint32_t* insn) : p_(insn) {}

  template <size_t k>
  uint32_t reg() const {
    static_assert(Layout::template kind<k>() == 'D' || Layout::template kind<k>() == 'R', "not a register operand");
    return p_[Layout::template offset<k>(p_)];
  }
  template <size_t k>
  uint32_t index() const {
    constexpr char c = Layout::template kind<k>();
    static_assert(std::string_view("FKCSAJITV").find(c) != std::string_view::npos, "not a one-word index operand");
    return p_[Layout::template offset<k>(p_)];
  }
  template <size_t k>
  uint64_t wide() const {
    static_assert(Layout::template kind<k>() == 'W', "not a 64-bit operand");
    uint32_t at = Layout::template offset<k>(p_);
    return p_[at] | static_cast<uint64_t>(p_[at + 1]) << 32;
  }
  template <size_t k>
  RegisterList list() const {
    static_assert(isListKind(Layout::template kind<k>()), "not a register list");
    uint32_t at = Layout::template offset<k>(p_);
    return RegisterList{p_ + at + 1, p_[at]};
  }
  uint32_t length() const { return Layout::template offset<Layout::count>(p_); }

 private:
  const uint32_t* p_;
};

// The length of the instruction at `insn`, whatever its opcode (which must be valid).
uint32_t instructionLength(const uint32_t* insn);

}  // namespace kiln::bytecode
