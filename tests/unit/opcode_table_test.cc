// The instruction table carries every fact: each opcode, encoded by
// InstructionWriter from its table row, decodes to the same operands, has the
// length its generated typed view says, passes the loader's verifier and
// disassembles under its mnemonic.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bytecode/instruction_writer.h"
#include "bytecode/opcodes.h"
#include "bytecode/operands.h"
#include "kernel_ir/fused_function.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"

using kiln::bytecode::InstructionView;
using kiln::bytecode::InstructionWriter;
using kiln::bytecode::Opcode;

namespace {

// A program whose executable has a kernel of each kind and a nullary constructor.
constexpr const char* kProgram = R"(
def @main(%x: Tensor[(2, 2), float32], %n: int32) {
  let %r = arange(0, %n, 1, dtype="int32");
  (%x * 2f, %n - 1, %r, Nil)
}
)";

uint32_t kernelOfKind(const kiln::Executable& exe, kiln::KernelKind kind) {
  for (uint32_t k = 0; k < exe.kernels().size(); ++k)
    if (exe.kernels()[k].kind == kind) return k;
  FAIL("no kernel of the kind needed");
  return 0;
}

}  // namespace

TEST_CASE("opcode table: every opcode round-trips through encode, decode, typed view, verify and disassemble") {
  auto exe = kiln::compile(kProgram, "table.relay");
  kiln::Executable::Contents base = exe->contents();
  const uint32_t probe = static_cast<uint32_t>(base.functions.size());  // the function added below: no parameters
  uint32_t nil = static_cast<uint32_t>(exe->constructorId("Nil"));
  REQUIRE(exe->constructors()[nil].arity == 0);
  kiln::Tensor shape = kiln::Tensor::empty(kiln::DType::Int64, {2});
  shape.data<int64_t>()[0] = shape.data<int64_t>()[1] = 2;
  base.constants.push_back(shape);
  const uint32_t shapeConstant = static_cast<uint32_t>(base.constants.size() - 1);
  base.strings.push_back("probe failure");
  const uint32_t message = static_cast<uint32_t>(base.strings.size() - 1);

  for (uint32_t code = 0; code < kiln::bytecode::kNumOpcodes; ++code) {
    Opcode op = static_cast<Opcode>(code);
    const auto& row = kiln::bytecode::info(op);
    CAPTURE(row.mnemonic);
    uint32_t kernel = kernelOfKind(*exe, op == Opcode::InvokeScalar    ? kiln::KernelKind::Scalar
                                               : op == Opcode::InvokeDynamic ? kiln::KernelKind::Dynamic
                                                                             : kiln::KernelKind::Compiled);
    const auto& kf = *exe->kernels()[kernel].function;
    std::vector<uint32_t> inRegs, outRegs;
    for (size_t i = 0; i < kf.params.size(); ++i) inRegs.push_back(static_cast<uint32_t>(1 + i));
    for (size_t i = 0; i < kf.outputs.size(); ++i) outRegs.push_back(static_cast<uint32_t>(4 + i));

    std::vector<InstructionWriter::Arg> args;
    int lists = 0;
    for (size_t k = 0; k < row.operands.size(); ++k) {
      switch (row.operands[k]) {
        case 'D':
        case 'R': args.push_back(InstructionWriter::word(1 + k)); break;
        case 'F': args.push_back(InstructionWriter::word(probe)); break;
        case 'K': args.push_back(InstructionWriter::word(kernel)); break;
        case 'C': args.push_back(InstructionWriter::word(op == Opcode::AllocTensor ? shapeConstant : 0)); break;
        case 'S': args.push_back(InstructionWriter::word(message)); break;
        case 'A': args.push_back(InstructionWriter::word(nil)); break;
        case 'J': args.push_back(InstructionWriter::word(0)); break;
        case 'I': args.push_back(InstructionWriter::word(64)); break;
        case 'T': args.push_back(InstructionWriter::word(static_cast<uint32_t>(kiln::DType::Int32))); break;
        case 'V': args.push_back(InstructionWriter::word(0)); break;
        case 'W': args.push_back(InstructionWriter::word(0x100000000ull + 4096)); break;
        case 'L':
        case 'M':
        case 'B': {
          // Kernel lists match the kernel's arity; a call of the probe passes none;
          // a constructor or closure list matches what it builds; a tuple takes two.
          std::vector<uint32_t> regs;
          if (row.operands == "KLL") regs = lists == 0 ? inRegs : outRegs;
          else if (op == Opcode::AllocTuple || op == Opcode::InvokeClosure || op == Opcode::TailCallClosure)
            regs = {2, 3 | kiln::bytecode::kMoveBit};
          args.push_back(InstructionWriter::regs(regs));
          ++lists;
          break;
        }
        default: FAIL("operand kind the test does not know: " << row.operands[k]);
      }
    }
    // A fork and a join come in pairs (the verifier checks): each gets the other.
    InstructionWriter w;
    uint32_t at = 0;
    if (op == Opcode::Join) {
      w.emit(Opcode::Fork, {InstructionWriter::word(1), InstructionWriter::word(probe), InstructionWriter::regs({})});
      at = w.size();
    }
    REQUIRE(w.emit(op, args) == at);
    uint32_t length = w.size() - at;
    if (op == Opcode::Fork) w.emitWords(Opcode::Join, {1});
    w.emitWords(Opcode::Ret, {0});  // every function ends in a terminator
    std::vector<uint32_t> words = w.take();

    // Decode: the same operands, in the same words.
    auto in = InstructionView::decode(words, at);
    REQUIRE(in);
    CHECK(in->op == op);
    CHECK(in->length == length);
    CHECK(kiln::bytecode::instructionLength(words.data() + at) == length);  // the typed views' generated length
    REQUIRE(in->numOperands == args.size());
    for (size_t k = 0; k < args.size(); ++k) {
      const auto& o = in->operands[k];
      CHECK(o.kind == row.operands[k]);
      if (args[k].isList) CHECK(std::vector<uint32_t>(o.list.begin(), o.list.end()) == args[k].list);
      else if (o.kind == 'W') CHECK(o.value64 == args[k].value);
      else CHECK(o.value == args[k].value);
    }
    // The table's facts: jumps, destinations, terminators.
    std::vector<uint32_t> jumps = in->jumpOperandWords();
    CHECK(jumps.size() == static_cast<size_t>(std::count(row.operands.begin(), row.operands.end(), 'J')));
    for (uint32_t j : jumps) CHECK(words[at + j] == 0u);
    std::vector<uint32_t> dsts = in->destinations();
    size_t wantDsts = static_cast<size_t>(std::count(row.operands.begin(), row.operands.end(), 'D')) +
                      (row.writesLastList() ? outRegs.size() : 0);
    CHECK(dsts.size() == wantDsts);
    CHECK(kiln::bytecode::isTerminator(op) == (op == Opcode::Ret || op == Opcode::TailCall || op == Opcode::TailCallClosure ||
                                               op == Opcode::Goto || op == Opcode::Fatal));

    // Verify and disassemble as part of an executable.
    kiln::Executable::Contents c = base;
    kiln::BytecodeFunction f;
    f.name = "probe";
    f.frameSize = 8;
    f.code = words;
    c.functions.push_back(f);
    std::shared_ptr<const kiln::Executable> built;
    try {
      built = kiln::Executable::build(std::move(c));
    } catch (const kiln::Error& e) {
      FAIL("the verifier refused " << row.mnemonic << ": " << e.what());
    }
    std::string text = built->disassemble(probe);
    CHECK(text.find(std::string(row.mnemonic) + " ") != std::string::npos);
  }
}

TEST_CASE("opcode table: the writer refuses instructions that do not match their row") {
  InstructionWriter w;
  CHECK_THROWS_AS(w.emitWords(Opcode::Move, {1}), kiln::Error);                      // too few operands
  CHECK_THROWS_AS(w.emitWords(Opcode::Invoke, {1, 0, 0}), kiln::Error);              // a list written as a word
  CHECK_THROWS_AS(w.emit(Opcode::Move, {InstructionWriter::regs({1}), InstructionWriter::word(2)}), kiln::Error);
  CHECK_THROWS_AS(w.emitWords(Opcode::Move, {1, 1ull << 32}), kiln::Error);          // not a 32-bit operand
  CHECK(w.size() == 0u);
}

TEST_CASE("opcode table: typed views read operands at generated offsets") {
  InstructionWriter w;
  // alloc_tensor_reg D R W R T: the W operand takes two words, so the register after it is at word 5.
  w.emitWords(Opcode::AllocTensorReg, {7, 6, 0x1234567800000009ull, 5, 3});
  // invoke_kernel K L L: the second list starts after the first list's entries.
  w.emit(Opcode::InvokeKernel, {InstructionWriter::word(2), InstructionWriter::regs({1, 2, 3}), InstructionWriter::regs({4})});
  std::vector<uint32_t> words = w.take();
  kiln::bytecode::Operands<Opcode::AllocTensorReg> a(words.data());
  CHECK(a.reg<0>() == 7u);
  CHECK(a.reg<1>() == 6u);
  CHECK(a.wide<2>() == 0x1234567800000009ull);
  CHECK(a.reg<3>() == 5u);
  CHECK(a.index<4>() == 3u);
  CHECK(a.length() == 7u);
  kiln::bytecode::Operands<Opcode::InvokeKernel> k(words.data() + 7);
  CHECK(k.index<0>() == 2u);
  CHECK(k.list<1>().size == 3u);
  CHECK(k.list<1>()[2] == 3u);
  CHECK(k.list<2>().size == 1u);
  CHECK(k.list<2>()[0] == 4u);
  CHECK(k.length() == 8u);
}
