// Forks: two independent calls of pure functions run at once (kiln/vm.h,
// "Forks"). The compiler's choice of where (`fork` ... `join` in the bytecode),
// the VM's results and errors against running the calls one after the other, the
// depth limit across a fork, many VMs forking on one pool, and the verifier's
// refusal of forks that could race.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "bytecode/instruction_writer.h"
#include "bytecode/opcodes.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"
#include "test_util.h"
#include "tree_program.h"

namespace {

using kiln::Tensor;
using kiln::Value;
using kiln::bytecode::InstructionWriter;
using kiln::bytecode::Opcode;

using kiln::test::buildTree;
using kiln::test::filled;
using kiln::test::kTree;
using kiln::test::runtimeWith;
using kiln::test::Tree;

std::string errorOf(const std::function<void()>& f) { return kiln::test::thrownBy(f); }

}  // namespace

TEST_CASE("fork: a tree's two subtrees are forked, with the result of running them in turn") {
  auto exe = kiln::compile(kTree, "tree.relay");
  std::string code;
  for (uint32_t f = 0; f < exe->functions().size(); ++f) code += exe->disassemble(f);
  CHECK(code.find("fork r") != std::string::npos);
  CHECK(code.find("join r") != std::string::npos);

  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  int seed = 3;
  Tree tree = buildTree(*exe, 7, w, b, seed);  // 128 leaves, 127 nodes
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    kiln::VMOptions o;
    o.runtime = runtimeWith(threads);
    kiln::VirtualMachine vm(exe, o);
    for (int run = 0; run < 3; ++run) {
      Tensor y = vm.invoke("main", {tree.value, Value(w), Value(b)}).tensor();
      REQUIRE(y.numel() == 8);
      for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == doctest::Approx(tree.expected[static_cast<size_t>(i)]).epsilon(1e-5));
    }
    // One thread: no worker to fork to. Two: the root's fork went to the worker
    // (or, had it not claimed it yet, ran at the join).
    if (threads == 1) CHECK(vm.forksRun() == 0);
    else CHECK(vm.forksRun() >= 1);
  }
}

TEST_CASE("fork: many VMs forking on one pool agree with the reference") {
  auto exe = kiln::compile(kTree, "tree.relay");
  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  int seed = 5;
  Tree tree = buildTree(*exe, 6, w, b, seed);
  auto runtime = runtimeWith(2);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      kiln::VMOptions o;
      o.runtime = runtime;
      kiln::VirtualMachine vm(exe, o);
      for (int run = 0; run < 20; ++run) {
        Tensor y = vm.invoke("main", {tree.value, Value(w), Value(b)}).tensor();
        for (int i = 0; i < 8; ++i)
          if (std::fabs(y.data<float>()[i] - tree.expected[static_cast<size_t>(i)]) > 1e-4) ++bad[static_cast<size_t>(t)];
      }
    });
  for (auto& th : threads) th.join();
  for (int n : bad) CHECK(n == 0);
}

TEST_CASE("fork: when both calls fail, the first one's error is reported, and the VM is reusable") {
  // @a and @b fail with their own match's location; the fork runs @a beside @b.
  const char* src = R"(
type T { Good(Tensor[(2), float32]), Bad }
def @a(%t: T) -> Tensor[(2), float32] { match? (%t) { Good(%x) => %x } }
def @b(%t: T) -> Tensor[(2), float32] { match? (%t) { Good(%x) => %x } }
def @main(%p: T, %q: T) -> Tensor[(2), float32] { let %u = @a(%p); let %v = @b(%q); add(%u, %v) }
)";
  auto exe = kiln::compile(src, "two.relay");
  CHECK(exe->disassemble(static_cast<uint32_t>(exe->functionIndex("main"))).find("fork") != std::string::npos);
  Tensor x = Tensor::empty(kiln::DType::Float32, {2});
  x.data<float>()[0] = 1;
  x.data<float>()[1] = 2;
  Value good = Value::adt(static_cast<uint32_t>(exe->constructorId("Good")), {Value(x)});
  Value bad = Value::adt(static_cast<uint32_t>(exe->constructorId("Bad")), {});
  kiln::VMOptions o;
  o.runtime = runtimeWith(2);
  kiln::VirtualMachine vm(exe, o);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    std::string both = errorOf([&] { vm.invoke("main", {bad, bad}); });
    CHECK(both.find("in @a: match? at two.relay:3:") != std::string::npos);
    std::string second = errorOf([&] { vm.invoke("main", {good, bad}); });
    CHECK(second.find("in @b: match? at two.relay:4:") != std::string::npos);
    std::string first = errorOf([&] { vm.invoke("main", {bad, good}); });
    CHECK(first.find("in @a: match? at two.relay:3:") != std::string::npos);
    Tensor y = vm.invoke("main", {good, good}).tensor();
    CHECK(y.data<float>()[0] == 2.0f);
    CHECK(y.data<float>()[1] == 4.0f);
  }
}

TEST_CASE("fork: the depth limit counts the forking VM's frames and the fork's") {
  auto exe = kiln::compile(kTree, "tree.relay");
  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  // A comb: each node's left child a deep chain, so the forked side recurses 60 deep.
  uint32_t leafCtor = static_cast<uint32_t>(exe->constructorId("BLeaf")), nodeCtor = static_cast<uint32_t>(exe->constructorId("BNode"));
  Value leaf = Value::adt(leafCtor, {Value(filled({1, 8}, 1.0f, 9))});
  Value chain = leaf;
  for (int i = 0; i < 60; ++i) chain = Value::adt(nodeCtor, {chain, leaf});
  Value root = Value::adt(nodeCtor, {chain, leaf});
  for (size_t limit : {size_t(40), size_t(200)}) {
    CAPTURE(limit);
    kiln::VMOptions o;
    o.runtime = runtimeWith(2);
    o.maxCallDepth = limit;
    kiln::VirtualMachine vm(exe, o);
    std::string err = errorOf([&] { vm.invoke("main", {root, Value(w), Value(b)}); });
    if (limit == 40) CHECK(err.find("recursion too deep") != std::string::npos);
    else CHECK(err.empty());
  }
}

TEST_CASE("fork: calls of functions with effects, or whose result the next call reads, are not forked") {
  // A reference cell written by the callee: the calls must stay in order.
  auto withRef = kiln::compile(R"(
def @bump(%r: ref(int32)) -> int32 { ref_write(%r, ref_read(%r) + 1); ref_read(%r) }
def @main() -> int32 { let %r = ref(0); let %a = @bump(%r); let %b = @bump(%r); %a * 10 + %b }
)", "ref.relay");
  std::string code;
  for (uint32_t f = 0; f < withRef->functions().size(); ++f) code += withRef->disassemble(f);
  CHECK(code.find("fork") == std::string::npos);
  kiln::VirtualMachine vm(withRef);
  CHECK(vm.invoke("main", std::initializer_list<Value>{}).tensor().data<int32_t>()[0] == 12);
  // The second call reads the first's result: a chain, not a pair.
  auto chained = kiln::compile(R"(
def @twice(%x: int32) -> int32 { %x * 2 }
def @main(%x: int32) -> int32 { let %a = @twice(%x); let %b = @twice(%a); %b }
)", "chain.relay");
  CHECK(chained->disassemble(static_cast<uint32_t>(chained->functionIndex("main"))).find("fork") == std::string::npos);
}

TEST_CASE("fork: the verifier refuses a fork that could race or never be joined") {
  const char* src = R"(
def @pure(%x: int32) -> int32 { %x + 1 }
def @effect(%r: ref(int32)) -> int32 { ref_write(%r, 1); 0 }
def @main(%x: int32) -> int32 { @pure(%x) }
)";
  auto exe = kiln::compile(src, "verify.relay");
  uint32_t pure = static_cast<uint32_t>(exe->functionIndex("pure")), effect = static_cast<uint32_t>(exe->functionIndex("effect"));
  // main's code replaced by `body`, then `ret r0`.
  auto build = [&](const std::function<void(InstructionWriter&)>& body) {
    kiln::Executable::Contents c = exe->contents();
    InstructionWriter w;
    body(w);
    w.emitWords(Opcode::Ret, {0});
    auto& main = c.functions[static_cast<size_t>(exe->functionIndex("main"))];
    main.code = w.take();
    main.frameSize = 6;
    return errorOf([&] { kiln::Executable::build(std::move(c)); });
  };
  auto fork = [](InstructionWriter& w, uint32_t dst, uint32_t f, uint32_t arg) {
    w.emit(Opcode::Fork, {InstructionWriter::word(dst), InstructionWriter::word(f), InstructionWriter::regs({arg})});
  };
  auto invoke = [](InstructionWriter& w, uint32_t dst, uint32_t f, uint32_t arg) {
    w.emit(Opcode::Invoke, {InstructionWriter::word(dst), InstructionWriter::word(f), InstructionWriter::regs({arg})});
  };
  // The well-formed pair is accepted.
  CHECK(build([&](InstructionWriter& w) {
          fork(w, 1, pure, 0);
          invoke(w, 2, pure, 0);
          w.emitWords(Opcode::Join, {1});
        }) == "");
  CHECK(build([&](InstructionWriter& w) {
          fork(w, 1, effect, 0);
          invoke(w, 2, pure, 0);
          w.emitWords(Opcode::Join, {1});
        }).find("fork of a function that is not pure") != std::string::npos);
  CHECK(build([&](InstructionWriter& w) {
          fork(w, 1, pure, 0);
          invoke(w, 2, effect, 0);
          w.emitWords(Opcode::Join, {1});
        }).find("only invokes of pure functions") != std::string::npos);
  CHECK(build([&](InstructionWriter& w) {
          fork(w, 1, pure, 0);
          invoke(w, 2, pure, 1);  // reads the fork's result before the join
          w.emitWords(Opcode::Join, {1});
        }).find("not touching its register") != std::string::npos);
  CHECK(build([&](InstructionWriter& w) {
          fork(w, 1, pure, 0);
          w.emitWords(Opcode::Move, {2, 0});
          w.emitWords(Opcode::Join, {1});
        }).find("only invokes of pure functions") != std::string::npos);
  CHECK(build([&](InstructionWriter& w) { fork(w, 1, pure, 0); }).find("fork without a join") != std::string::npos);
  CHECK(build([&](InstructionWriter& w) { w.emitWords(Opcode::Join, {1}); }).find("join without a fork") != std::string::npos);
  // A jump into the straight-line code between fork and join.
  CHECK(build([&](InstructionWriter& w) {
          uint32_t br = w.emitWords(Opcode::BranchIfNot, {0, 0});
          fork(w, 1, pure, 0);
          uint32_t target = w.size();
          invoke(w, 2, pure, 0);
          w.emitWords(Opcode::Join, {1});
          w[br + 2] = target;
        }).find("a jump lands between a fork and its join") != std::string::npos);
}

TEST_CASE("fork: a fork's VM allocates from pools of its own, counted with the forking VM's") {
  auto exe = kiln::compile(kTree, "tree.relay");
  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  int seed = 13;
  Tree tree = buildTree(*exe, 9, w, b, seed);  // 512 leaves, 511 nodes: a fork long enough to stay forked
  auto shared = std::make_shared<kiln::MemoryPools>();
  for (bool ownPools : {true, false}) {
    CAPTURE(ownPools);
    kiln::VMOptions o;
    o.runtime = runtimeWith(2);
    if (!ownPools) o.pools = shared;
    kiln::VirtualMachine vm(exe, o);
    constexpr int kRuns = 3;
    for (int run = 0; run < kRuns; ++run) {
      Tensor y = vm.invoke("main", {tree.value, Value(w), Value(b)}).tensor();
      for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == doctest::Approx(tree.expected[static_cast<size_t>(i)]).epsilon(1e-5));
    }
    CHECK(vm.forksRun() >= 1);
    // Every node's result is one allocation, on whichever side of the fork it ran.
    kiln::VMMemoryStats s = vm.memoryStats();
    CHECK(s.allocations == 511u * kRuns);
    REQUIRE(s.pools.size() == 1);
    CHECK(s.pools[0].bytesInUse == 0);
    CHECK(s.pools[0].hits + s.pools[0].misses > 0);
  }
}
