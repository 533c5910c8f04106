// Kernel merging (compiler/passes/merge_kernels.h): which consecutive kernels
// become one, which results the merged kernel returns, and that programs give
// the results they give unmerged.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "compiler/passes/fuse_ops.h"
#include "compiler/passes/to_fused_function.h"
#include "kiln/compile.h"
#include "kiln/vm.h"
#include "kernel_util.h"
#include "test_util.h"

namespace {

using kiln::DType;
using kiln::Tensor;
using kiln::Value;

struct Kernel {
  std::string ops;  // operator names, in order
  size_t outputs;
};

// The kernels of a program's functions after fusion, merged or not.
std::vector<Kernel> kernelsOf(const std::string& src, bool merge) {
  auto m = kiln::test::check(src);
  kiln::compiler::FuseOptions o;
  o.mergeKernels = merge;
  auto fused = kiln::compiler::fuseOps(*m, o);
  std::vector<Kernel> out;
  for (const kiln::ir::Function* fn : kiln::compiler::primitiveFunctions(*fused)) {
    kiln::kernel_ir::FusedFunction f = kiln::compiler::toFusedFunction(fn, "k");
    Kernel k{"", f.outputs.size()};
    for (const auto& n : f.nodes)
      if (!n.isConstant()) k.ops += (k.ops.empty() ? "" : " ") + n.op->name;
    out.push_back(k);
  }
  return out;
}

bool hasKernel(const std::vector<Kernel>& ks, const std::string& op, size_t outputs) {
  for (const Kernel& k : ks)
    if (k.ops.find(op) != std::string::npos && k.outputs == outputs) return true;
  return false;
}

// `main`'s result, printed, with the kernels merged or not.
std::string resultOf(const std::string& src, bool merge, const std::vector<Value>& args) {
  kiln::CompileOptions o;
  o.mergeKernels = merge;
  auto exe = kiln::compile(src, "merge.relay", o);
  kiln::VirtualMachine vm(exe);
  return exe->format(vm.invoke("main", args));
}

std::vector<Value> randomArgs(std::initializer_list<std::initializer_list<int64_t>> shapes, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Value> out;
  for (auto s : shapes) out.push_back(Value(kiln::test::randomTensor(DType::Float32, s, rng, -1, 1)));
  return out;
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// An LSTM cell stepped by a counting loop, PyTorch-style: 2 products, a split,
// the gates. After fusion its step is three kernels: product and split, the
// cell state (also the next step's input), the hidden state.
const std::string kLstm = R"(
def @main(%xs: Tensor[(5, 1, 8), float32], %w_ih: Tensor[(64, 8), float32], %w_hh: Tensor[(64, 16), float32],
          %b: Tensor[(64,), float32]) -> Tensor[(1, 16), float32] {
  let %loop = fn (%t: int32, %h: Tensor[(1, 16), float32], %c: Tensor[(1, 16), float32]) -> Tensor[(1, 16), float32] {
    if (%t == 5) {
      %h
    } else {
      let %x = take(%xs, %t, axis=0);
      let %g = add(nn.bias_add(nn.dense(%x, %w_ih, units=64), %b), nn.dense(%h, %w_hh, units=64));
      let %s = split(%g, indices_or_sections=4, axis=1);
      let %c2 = add(multiply(sigmoid(%s.1), %c), multiply(sigmoid(%s.0), tanh(%s.2)));
      let %h2 = multiply(sigmoid(%s.3), tanh(%c2));
      %loop(add(%t, 1), %h2, %c2)
    }
  };
  let %z = zeros(shape=[1, 16], dtype="float32");
  %loop(0, %z, %z)
}
)";

}  // namespace

TEST_CASE("merge: an LSTM step is one kernel returning the cell and hidden states, with the unmerged results") {
  std::vector<Kernel> unmerged = kernelsOf(kLstm, false), merged = kernelsOf(kLstm, true);
  CHECK(merged.size() + 2 == unmerged.size());
  // The product, the split and both gates' arithmetic in one kernel; its results
  // are %c2 (read by %h2 and the next step) and %h2, not the split's parts.
  bool found = false;
  for (const Kernel& k : merged)
    if (k.ops.find("nn.dense") != std::string::npos && k.ops.find("split") != std::string::npos &&
        k.ops.find("tanh") != std::string::npos) {
      found = true;
      CHECK(k.outputs == 2);
    }
  CHECK(found);
  std::vector<Value> args = randomArgs({{5, 1, 8}, {64, 8}, {64, 16}, {64}}, 11);
  std::string want = resultOf(kLstm, false, args);
  CHECK(want.find("1x16xf32=") == 0);
  CHECK(resultOf(kLstm, true, args) == want);
}

TEST_CASE("merge: the LSTM-over-a-list sample's cell returns only the split part and state read after it") {
  // Graph style: %9 (the cell state) is read by the hidden state's kernel, which
  // is not a binding (it is in the result tuple), and by the result: the merged
  // kernel returns %4.3 and %9, not the split's four parts.
  const std::string src = readText(std::string(KILN_SOURCE_DIR) + "/samples/lstm_list.relay");
  std::vector<Kernel> merged = kernelsOf(src, true);
  CHECK(hasKernel(merged, "split", 2));
  CHECK_FALSE(hasKernel(merged, "split", 4));
  CHECK(hasKernel(kernelsOf(src, false), "split", 4));
  std::vector<Value> args = randomArgs({{1, 8}, {1, 8}, {1, 8}, {64, 8}, {64, 16}, {64}}, 3);
  CHECK(resultOf(src, true, args) == resultOf(src, false, args));
}

TEST_CASE("merge: a chain result read by field after the chain, also in a branch, or whole, is the merged kernel's") {
  // The product's kernel (dense, bias, split), then %a and %b joining it. After
  // the chain: %s's part 1 in a branch, %a and %b in the result.
  const std::string byField = R"(
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(32, 8), float32], %bias: Tensor[(32,), float32], %k: bool) {
  let %s = split(nn.bias_add(nn.dense(%x, %w, units=32), %bias), indices_or_sections=2, axis=1);
  let %a = sigmoid(%s.0);
  let %b = multiply(%a, %s.1);
  let %r = if (%k) { %s.1 } else { %b };
  (%r, %a, %b)
}
)";
  std::vector<Kernel> merged = kernelsOf(byField, true);
  REQUIRE(merged.size() == 1);
  for (const char* op : {"nn.dense", "nn.bias_add", "split", "sigmoid", "multiply"}) CHECK(merged[0].ops.find(op) != std::string::npos);
  CHECK(merged[0].outputs == 3);  // %s.1, %a, %b
  // %s returned whole: both its parts are results; %a is read by %b alone.
  const std::string whole = R"(
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(32, 8), float32], %bias: Tensor[(32,), float32], %k: bool) {
  let %s = split(nn.bias_add(nn.dense(%x, %w, units=32), %bias), indices_or_sections=2, axis=1);
  let %a = sigmoid(%s.0);
  let %b = multiply(%a, %s.1);
  if (%k) { (%b, %s) } else { (%s.0, %s) }
}
)";
  merged = kernelsOf(whole, true);
  REQUIRE(merged.size() == 1);
  CHECK(merged[0].outputs == 3);  // %s.0, %s.1, %b
  for (const std::string* src : {&byField, &whole})
    for (bool k : {true, false}) {
      std::vector<Value> args = randomArgs({{2, 8}, {32, 8}, {32}}, 5);
      args.push_back(Value::intScalar(DType::Bool, k));
      std::string want = resultOf(*src, false, args);
      CHECK(want.find("2x16xf32=") != std::string::npos);
      CHECK(resultOf(*src, true, args) == want);
    }
}

TEST_CASE("merge: kernels stay apart where a result would be recomputed or the lowering differs") {
  // The consumer broadcasts the product's row over 4 rows: merged, every row
  // would recompute it.
  const std::string broadcast = R"(
def @main(%x: Tensor[(1, 8), float32], %w: Tensor[(16, 8), float32], %y: Tensor[(4, 16), float32]) {
  let %s = nn.dense(%x, %w, units=16);
  let %t = add(%s, %y);
  (%t, %s)
}
)";
  CHECK(kernelsOf(broadcast, true).size() == 2);
  // The same with equal shapes merges into one kernel of two results.
  const std::string same = R"(
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32], %y: Tensor[(4, 16), float32]) {
  let %s = nn.dense(%x, %w, units=16);
  let %t = add(%s, %y);
  (%t, %s)
}
)";
  CHECK(kernelsOf(same, false).size() == 2);
  std::vector<Kernel> merged = kernelsOf(same, true);
  REQUIRE(merged.size() == 1);
  CHECK(merged[0].outputs == 2);
  std::vector<Value> args = randomArgs({{4, 8}, {16, 8}, {4, 16}}, 7);
  CHECK(resultOf(same, true, args) == resultOf(same, false, args));
  // A reduction has a lowering of its own: it starts no chain.
  const std::string reduce = R"(
def @main(%x: Tensor[(4, 16), float32]) {
  let %m = sum(%x, axis=[1], keepdims=True);
  let %y = multiply(%m, 2f);
  (%y, %m)
}
)";
  CHECK(kernelsOf(reduce, true).size() == 2);
  // `?` extents may broadcast at run time.
  const std::string dynamic = R"(
def @main(%x: Tensor[(?, 8), float32], %w: Tensor[(16, 8), float32], %y: Tensor[(?, 16), float32]) {
  let %s = nn.dense(%x, %w, units=16);
  let %t = add(%s, %y);
  (%t, %s)
}
)";
  CHECK(kernelsOf(dynamic, true).size() == 2);
  // A binding between them: the chain is consecutive bindings only.
  const std::string apart = R"(
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32], %y: Tensor[(4, 16), float32]) {
  let %s = nn.dense(%x, %w, units=16);
  let %n = (%s, %y);
  let %t = add(%s, %y);
  (%t, %n)
}
)";
  CHECK(kernelsOf(apart, true).size() == 2);
}
