// The instruction set as data: the Opcode enum and a table of each opcode's
// mnemonic, operand layout and meaning, all generated from bytecode/opcodes.def.
//
// Encoding: a function's code is a vector of 32-bit words. An instruction is its
// opcode word followed by its operand words, laid out as the table's operand string
// says (see opcodes.def). InstructionView decodes one instruction generically —
// the verifier, the disassembler and the emitter's self-check use it — while the
// VM's handlers read operands directly in the same order.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::bytecode {

enum class Opcode : uint32_t {
#define KILN_OPCODE(name, mnemonic, operands, flags, meaning) name,
#include "bytecode/opcodes.def"
#undef KILN_OPCODE
};

inline constexpr uint32_t kNumOpcodes = 0
#define KILN_OPCODE(name, mnemonic, operands, flags, meaning) +1
#include "bytecode/opcodes.def"
#undef KILN_OPCODE
    ;

// In an `M` list, a register marked with this bit is moved, not copied.
inline constexpr uint32_t kMoveBit = 0x8000'0000u;
// In a `B` list, a register marked with this bit is passed as a view.
inline constexpr uint32_t kViewBit = 0x4000'0000u;
// A list entry's register, without its move or view bit.
constexpr uint32_t listRegister(uint32_t entry) { return entry & ~(kMoveBit | kViewBit); }
// Operand kinds that are register lists (count, then entries).
constexpr bool isListKind(char k) { return k == 'L' || k == 'M' || k == 'B'; }

struct OpcodeInfo {
  std::string_view mnemonic;
  std::string_view operands;  // operand kind letters, see opcodes.def
  std::string_view flags;     // T terminator, O writes its last list, P passes deferred calls
  std::string_view meaning;

  constexpr bool isTerminator() const { return flags.find('T') != std::string_view::npos; }
  constexpr bool writesLastList() const { return flags.find('O') != std::string_view::npos; }
  constexpr bool passesDeferred() const { return flags.find('P') != std::string_view::npos; }
  constexpr bool hasList() const { return operands.find_first_of("LMB") != std::string_view::npos; }
  // Words of an instruction without lists (opcode word included); 0 when it has lists.
  constexpr uint32_t fixedLength() const {
    if (hasList()) return 0;
    uint32_t n = 1;
    for (char k : operands) n += k == 'W' ? 2 : 1;
    return n;
  }
};

inline constexpr OpcodeInfo kOpcodeInfo[] = {
#define KILN_OPCODE(name, mnemonic, operands, flags, meaning) {mnemonic, operands, flags, meaning},
#include "bytecode/opcodes.def"
#undef KILN_OPCODE
};

constexpr const OpcodeInfo& info(Opcode op) { return kOpcodeInfo[static_cast<uint32_t>(op)]; }

// Instructions after which control never falls through to the next word.
constexpr bool isTerminator(Opcode op) { return info(op).isTerminator(); }
// Instructions that leave kernel calls the VM deferred deferred (opcodes.def, P).
constexpr bool passesDeferred(Opcode op) { return info(op).passesDeferred(); }

// One decoded operand: its kind letter and either a single word (`value`, with
// `value64` for W) or, for L, the list of registers.
struct Operand {
  char kind = 0;
  uint32_t value = 0;
  uint64_t value64 = 0;
  std::span<const uint32_t> list;
  uint32_t word = 0;  // where it starts, in words from the opcode word (a list: at its count)
};

// A decoded instruction (the generic view the verifier, the disassembler and
// tests use; the VM's handlers use the typed views of bytecode/operands.h).
// decode() returns nullopt when the words at `pc` are not a
// whole instruction (unknown opcode, or operands past the end of the code).
struct InstructionView {
  Opcode op;
  uint32_t pc;       // word offset of the opcode
  uint32_t length;   // in words
  Operand operands[6];
  uint32_t numOperands = 0;

  static std::optional<InstructionView> decode(std::span<const uint32_t> code, uint32_t pc);

  // Every register the instruction writes: its D operands and, for opcodes
  // flagged O, the entries of its last list.
  std::vector<uint32_t> destinations() const;
  // The word offsets (from the opcode word) of its J operands.
  std::vector<uint32_t> jumpOperandWords() const;
};

// Device operands (and the executable file's device words): kind (0 cpu, 1 cuda, 2 cuda-emu) << 16 | index.
inline uint32_t encodeDevice(Device d) { return static_cast<uint32_t>(d.kind) << 16 | d.index; }
inline Device decodeDevice(uint32_t word) {
  return Device{static_cast<Device::Kind>(word >> 16), static_cast<uint16_t>(word & 0xFFFF)};
}
// Whether a word names a device kind this build knows.
inline bool validDeviceWord(uint32_t word) { return (word >> 16) <= static_cast<uint32_t>(Device::Kind::CudaEmu); }

}  // namespace kiln::bytecode
