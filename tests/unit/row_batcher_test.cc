// Dynamic batching in the VM (vm/row_batcher.h): a tree's nodes run as one
// kernel call per level, with the results of running them one by one (and of a
// double-precision reference); deferred results are computed before anything
// reads them; chains of calls with nothing to batch back off; and profiling,
// forks and a queue longer than the cap keep the results.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"
#include "runtime/kernel_table.h"
#include "tree_program.h"

namespace {

using kiln::Tensor;
using kiln::Value;
using kiln::test::buildTree;
using kiln::test::filled;
using kiln::test::kTree;
using kiln::test::runtimeWith;
using kiln::test::Tree;

kiln::VMOptions optionsWith(int threads, bool batching) {
  kiln::VMOptions o;
  o.runtime = runtimeWith(threads);
  o.rowBatching = batching;
  return o;
}

void checkClose(const Tensor& got, const Tensor& want, double tolerance = 1e-5) {
  REQUIRE(got.shape() == want.shape());
  for (int64_t i = 0; i < got.numel(); ++i)
    CHECK(got.data<float>()[i] == doctest::Approx(want.data<float>()[i]).epsilon(tolerance));
}

}  // namespace

TEST_CASE("row batching: a tree's nodes run one batch per level, with the results of one call per node") {
  auto exe = kiln::compile(kTree, "tree.relay");
  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  int seed = 3;
  Tree tree = buildTree(*exe, 5, w, b, seed);  // 32 leaves, 31 nodes: levels of 16, 8, 4, 2 and the root
  kiln::VirtualMachine batched(exe, optionsWith(1, true)), single(exe, optionsWith(1, false));
  for (int run = 1; run <= 3; ++run) {
    CAPTURE(run);
    Tensor y = batched.invoke("main", {tree.value, Value(w), Value(b)}).tensor();
    Tensor z = single.invoke("main", {tree.value, Value(w), Value(b)}).tensor();
    checkClose(y, z);
    for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == doctest::Approx(tree.expected[static_cast<size_t>(i)]).epsilon(1e-5));
    // The root is alone at its level: it runs as called.
    CHECK(batched.rowBatches() == 4u * static_cast<uint64_t>(run));
    CHECK(batched.rowBatchedCalls() == 30u * static_cast<uint64_t>(run));
  }
  CHECK(single.rowBatchedCalls() == 0);
}

// Each node's children swap the two weight sets, so every level below the root
// interleaves calls on w with calls on u: a level's calls are grouped by their
// shared inputs (two batches a level), each group in the order it was made, and
// every inner result a batch reads is one a lower level's batch wrote.
TEST_CASE("row batching: calls of one level on two interleaved weight sets run as two batches") {
  const char* program = R"(
type BTree { BLeaf(Tensor[(1, 8), float32]), BNode(BTree, BTree) }
def @main(%t: BTree, %w: Tensor[(8, 16), float32], %u: Tensor[(8, 16), float32]) -> Tensor[(1, 8), float32] {
  let %reduce = fn (%n: BTree, %a: Tensor[(8, 16), float32], %o: Tensor[(8, 16), float32]) -> Tensor[(1, 8), float32] {
    match %n {
      BLeaf(%v) => %v,
      BNode(%l, %r) => tanh(nn.dense(concatenate((%reduce(%l, %a, %o), %reduce(%r, %o, %a)), axis=1), %a, units=8)),
    }
  };
  %reduce(%t, %w, %u)
}
)";
  auto exe = kiln::compile(program, "swapped.relay");
  Tensor w = filled({8, 16}, 0.3f, 1), u = filled({8, 16}, 0.25f, 7);
  int seed = 3;
  // The reference: the same recursion in double precision.
  std::vector<double> leaves;
  auto leaf = [&] {
    Tensor t = filled({1, 8}, 1.0f, seed++);
    leaves.assign(t.data<float>(), t.data<float>() + 8);
    return t;
  };
  struct Node {
    Value value;
    std::vector<double> y;
  };
  auto build = [&](auto& self, int depth, const Tensor& a, const Tensor& o) -> Node {
    if (depth == 0) {
      Tensor t = leaf();
      return {Value::adt(static_cast<uint32_t>(exe->constructorId("BLeaf")), {Value(t)}), leaves};
    }
    Node l = self(self, depth - 1, a, o), r = self(self, depth - 1, o, a);
    std::vector<double> x(l.y);
    x.insert(x.end(), r.y.begin(), r.y.end());
    std::vector<double> y(8);
    for (int i = 0; i < 8; ++i) {
      double s = 0;
      for (int k = 0; k < 16; ++k) s += a.data<float>()[i * 16 + k] * x[static_cast<size_t>(k)];
      y[static_cast<size_t>(i)] = std::tanh(s);
    }
    return {Value::adt(static_cast<uint32_t>(exe->constructorId("BNode")), {l.value, r.value}), y};
  };
  Node tree = build(build, 5, w, u);  // 32 leaves; levels of 16, 8, 4, 2 and the root, half on w and half on u
  kiln::VirtualMachine batched(exe, optionsWith(1, true)), single(exe, optionsWith(1, false));
  for (int run = 1; run <= 2; ++run) {
    CAPTURE(run);
    Tensor y = batched.invoke("main", {tree.value, Value(w), Value(u)}).tensor();
    checkClose(y, single.invoke("main", {tree.value, Value(w), Value(u)}).tensor());
    for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == doctest::Approx(tree.y[static_cast<size_t>(i)]).epsilon(1e-5));
    // Levels of 16, 8 and 4 give two batches each (8 + 8, 4 + 4, 2 + 2 calls);
    // the level of 2 has one call on each set, and the root one: run as called.
    CHECK(batched.rowBatches() == 6u * static_cast<uint64_t>(run));
    CHECK(batched.rowBatchedCalls() == 28u * static_cast<uint64_t>(run));
  }
}

TEST_CASE("row batching: constant weights come from the VM's inline cache, not the kernel table, batch after batch") {
  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  kiln::CompileOptions co;
  co.params["w"] = w;
  co.params["b"] = b;
  auto exe = kiln::compile(kTree, "tree.relay", co);
  int seed = 3;
  Tree tree = buildTree(*exe, 5, w, b, seed);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    kiln::VirtualMachine vm(exe, optionsWith(threads, true));
    auto table = vm.runtime().kernelTable(exe);
    uint64_t afterFirst = 0;
    for (int run = 1; run <= 4; ++run) {
      CAPTURE(run);
      Tensor y = vm.invoke("main", {tree.value}).tensor();
      for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == doctest::Approx(tree.expected[static_cast<size_t>(i)]).epsilon(1e-5));
      auto stats = table->preparedStats();
      CHECK(stats.count == 1);  // the weight, packed once
      if (run == 1) afterFirst = stats.lookups;
      // Each batch asked the table under its lock (hashing twice) before; now
      // only a VM's first sight of a weight does (a fork's VM has a cache too).
      CHECK(stats.lookups == afterFirst);
    }
    CHECK(vm.rowBatches() > 0);
    CHECK(afterFirst >= 1);
    CHECK(afterFirst <= 4);
  }
}

TEST_CASE("row batching: a deferred result is computed before an instruction reads it") {
  // The whole tree is deferred; then an eager kernel (a sum over the row, not
  // batchable) and br_false read the root, and a reshape views its memory.
  const char* src = R"(
type BTree { BLeaf(Tensor[(1, 8), float32]), BNode(BTree, BTree) }
def @main(%t: BTree, %w: Tensor[(8, 16), float32], %b: Tensor[(8,), float32]) -> (Tensor[(1, 8), float32], Tensor[(8), float32]) {
  let %reduce = fn (%n: BTree) -> Tensor[(1, 8), float32] {
    match %n {
      BLeaf(%v) => %v,
      BNode(%l, %r) => tanh(nn.bias_add(nn.dense(concatenate((%reduce(%l), %reduce(%r)), axis=1), %w, units=8), %b)),
    }
  };
  let %root = %reduce(%t);
  let %s = if (greater(sum(%root), 0f)) { exp(%root) } else { negative(%root) };
  (%s, reshape(%root, newshape=[8]))
}
)";
  auto exe = kiln::compile(src, "reads.relay");
  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  bool sawPositive = false, sawNegative = false;  // both branches taken
  for (int seed : {7, 19, 23, 31}) {
    CAPTURE(seed);
    int next = seed;
    Tree tree = buildTree(*exe, 6, w, b, next);
    double sum = 0;
    for (double v : tree.expected) sum += v;
    (sum > 0 ? sawPositive : sawNegative) = true;
    kiln::VirtualMachine batched(exe, optionsWith(1, true)), single(exe, optionsWith(1, false));
    for (int run = 0; run < 2; ++run) {
      Value y = batched.invoke("main", {tree.value, Value(w), Value(b)});
      Value z = single.invoke("main", {tree.value, Value(w), Value(b)});
      checkClose(y.fields()[0].tensor(), z.fields()[0].tensor());
      checkClose(y.fields()[1].tensor(), z.fields()[1].tensor());
      for (int i = 0; i < 8; ++i) {
        double x = tree.expected[static_cast<size_t>(i)];
        CHECK(y.fields()[0].tensor().data<float>()[i] == doctest::Approx(sum > 0 ? std::exp(x) : -x).epsilon(1e-5));
        CHECK(y.fields()[1].tensor().data<float>()[i] == doctest::Approx(x).epsilon(1e-5));
      }
    }
    CHECK(batched.rowBatchedCalls() > 0);
  }
  CHECK(sawPositive);
  CHECK(sawNegative);
}

TEST_CASE("row batching: a loop's chain of calls backs off and keeps its results") {
  // Every step reads the last one's result: nothing to batch.
  const char* src = R"(
def @step(%i: int32, %h: Tensor[(1, 8), float32], %w: Tensor[(8, 8), float32]) -> Tensor[(1, 8), float32] {
  if (less(%i, 50)) { @step(add(%i, 1), tanh(nn.dense(%h, %w, units=8)), %w) } else { %h }
}
def @main(%h: Tensor[(1, 8), float32], %w: Tensor[(8, 8), float32]) -> Tensor[(1, 8), float32] { @step(0, %h, %w) }
)";
  auto exe = kiln::compile(src, "chain.relay");
  Tensor h = filled({1, 8}, 1.0f, 4), w = filled({8, 8}, 0.4f, 5);
  kiln::VirtualMachine batched(exe, optionsWith(1, true)), single(exe, optionsWith(1, false));
  for (int run = 0; run < 3; ++run)
    checkClose(batched.invoke("main", {Value(h), Value(w)}).tensor(), single.invoke("main", {Value(h), Value(w)}).tensor());
  CHECK(batched.rowBatchedCalls() == 0);
}

TEST_CASE("row batching: forks, profiling and a queue past its cap keep the results") {
  auto exe = kiln::compile(kTree, "tree.relay");
  Tensor w = filled({8, 16}, 0.3f, 1), b = filled({8}, 0.1f, 2);
  int seed = 11;
  // 8192 leaves: more deferred calls than the cap (vm/row_batcher.h), so the
  // queue runs part way through the tree.
  Tree big = buildTree(*exe, 13, w, b, seed);
  Tree small = buildTree(*exe, 6, w, b, seed);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    kiln::VirtualMachine vm(exe, optionsWith(threads, true));
    for (const Tree* t : {&big, &small}) {
      Tensor y = vm.invoke("main", {t->value, Value(w), Value(b)}).tensor();
      for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == doctest::Approx(t->expected[static_cast<size_t>(i)]).epsilon(1e-4));
    }
    CHECK(vm.rowBatchedCalls() > 8000);
  }
  // Profiled, every call runs (and is counted) where it is made.
  kiln::VirtualMachine profiled(exe, optionsWith(1, true));
  profiled.enableProfiling();
  Tensor y = profiled.invoke("main", {small.value, Value(w), Value(b)}).tensor();
  for (int i = 0; i < 8; ++i) CHECK(y.data<float>()[i] == doctest::Approx(small.expected[static_cast<size_t>(i)]).epsilon(1e-5));
  CHECK(profiled.rowBatchedCalls() == 0);
  uint64_t calls = 0;
  for (const auto& p : profiled.kernelProfile()) calls += p.calls;
  CHECK(calls == 63);
}

TEST_CASE("row batching: a tree of LSTM-like cells (gates split across the row) batches its levels") {
  // node: gates = dense(concat(l, r)) + b, split in four; h = o * tanh(i * u)
  const char* src = R"(
type BTree { BLeaf(Tensor[(1, 8), float32]), BNode(BTree, BTree) }
def @main(%t: BTree, %w: Tensor[(32, 16), float32], %b: Tensor[(32,), float32]) -> Tensor[(1, 8), float32] {
  let %reduce = fn (%n: BTree) -> Tensor[(1, 8), float32] {
    match %n {
      BLeaf(%v) => %v,
      BNode(%l, %r) => {
        let %g: (Tensor[(1, 8), float32], Tensor[(1, 8), float32], Tensor[(1, 8), float32], Tensor[(1, 8), float32]) = split(nn.bias_add(nn.dense(concatenate((%reduce(%l), %reduce(%r)), axis=1), %w, units=32), %b), indices_or_sections=4, axis=1);
        multiply(sigmoid(%g.2), tanh(multiply(sigmoid(%g.0), tanh(%g.3))))
      },
    }
  };
  %reduce(%t)
}
)";
  auto exe = kiln::compile(src, "treelstm.relay");
  Tensor w = filled({32, 16}, 0.3f, 1), b = filled({32}, 0.1f, 2);
  // Leaves as kTree's builder makes them (its reference is for tanh nodes: the
  // cells are checked against running every call where it is made).
  int seed = 17;
  Tree tree = buildTree(*exe, 5, filled({8, 16}, 0.3f, 1), filled({8}, 0.1f, 2), seed);
  kiln::VirtualMachine batched(exe, optionsWith(1, true)), single(exe, optionsWith(1, false));
  for (int run = 0; run < 2; ++run)
    checkClose(batched.invoke("main", {tree.value, Value(w), Value(b)}).tensor(),
               single.invoke("main", {tree.value, Value(w), Value(b)}).tensor());
  // Each node calls two kernels (kilnc --emit kernels): the product split into
  // the gates, then the cell over them. Both batch (the first only because a
  // split across the row keeps rows apart): 30 nodes of 31, the root alone.
  CHECK(batched.rowBatchedCalls() == 2 * 60);
  CHECK(batched.rowBatches() == 2 * 8);
}
