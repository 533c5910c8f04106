// The dnnl library: partitioned regions run as oneDNN primitives and agree with
// Kiln's own kernels — products and convolutions with their bias, activations
// and added tensors, odd and `?` shapes, constant weights, saved executables —
// and a library failure is a kiln::Error naming the library and the kernel.
// Skipped (and reported as skipped) when Kiln is built without oneDNN.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <thread>

#include "compiler/pipeline.h"
#include "kernel_ir/library_support.h"
#include "kiln/compile.h"
#include "kiln/vm.h"
#include "test_skip.h"

namespace {

using namespace kiln;

bool haveDnnl() { return kernel_ir::findLibrary("dnnl")->available; }

Tensor random(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
  return t;
}

// Library kernels in an executable.
int dnnlKernels(const Executable& exe) {
  int n = 0;
  for (const KernelInfo& k : exe.kernels()) {
    n += k.function->library == "dnnl";
    CHECK((k.kind == KernelKind::Library) == !k.function->library.empty());  // a kernel kind of its own
  }
  return n;
}

std::shared_ptr<const Executable> compileWith(const std::string& src, bool dnnl, std::map<std::string, Tensor> params = {}) {
  CompileOptions o;
  if (dnnl) o.partition = {"dnnl"};
  o.params = std::move(params);
  return compile(src, "dnnl.relay", o);
}

Tensor run(const std::shared_ptr<const Executable>& exe, const std::vector<Tensor>& args) {
  VirtualMachine vm(exe);
  std::vector<Value> vs;
  for (const Tensor& t : args) vs.emplace_back(t);
  Value v = vm.invoke("main", vs);
  REQUIRE(v.isTensor());
  return v.tensor();
}

void requireClose(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    float g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::fabs(g - w) > 1e-4f * (1.0f + std::fabs(w))) {
      FAIL("element " << i << ": dnnl " << g << ", Kiln " << w);
    }
  }
}

// `src` partitioned for dnnl and not: `kernels` library kernels, the same values.
void agree(const std::string& src, const std::vector<Tensor>& args, int kernels) {
  CAPTURE(src);
  auto lib = compileWith(src, true), own = compileWith(src, false);
  CHECK(dnnlKernels(*lib) == kernels);
  CHECK(dnnlKernels(*own) == 0);
  requireClose(run(lib, args), run(own, args));
}

}  // namespace

TEST_CASE("dnnl: dense, matmul and their bias, activations and added tensors at odd and ? shapes") {
  if (!haveDnnl()) return kiln::test::skip("Kiln is built without oneDNN");
  for (int64_t rows : {1, 3, 17})
    for (int64_t k : {5, 33, 130}) {
      std::string K = std::to_string(k), R = std::to_string(rows);
      std::string src = "def @main(%x: Tensor[(" + R + ", " + K + "), float32], %w: Tensor[(24, " + K +
                        "), float32], %b: Tensor[(24), float32]) { nn.relu(add(nn.dense(%x, %w), %b)) }";
      agree(src, {random({rows, k}, 1), random({24, k}, 2), random({24}, 3)}, 1);
    }
  // A residual add (same shape) and tanh after the product; sigmoid alone.
  agree(R"(def @main(%x: Tensor[(3, 7), float32], %w: Tensor[(9, 7), float32], %r: Tensor[(3, 9), float32]) {
    sigmoid(tanh(add(nn.dense(%x, %w), %r))) })",
        {random({3, 7}, 4), random({9, 7}, 5), random({3, 9}, 6)}, 1);
  // Two products summed (an LSTM gate): the add waits for the second product, whichever comes first.
  agree(R"(def @main(%x: Tensor[(1, 8), float32], %w: Tensor[(64, 8), float32], %h: Tensor[(1, 16), float32], %u: Tensor[(64, 16), float32]) {
    tanh(add(nn.dense(%x, %w), nn.dense(%h, %u))) })",
        {random({1, 8}, 38), random({64, 8}, 39), random({1, 16}, 40), random({64, 16}, 41)}, 1);
  agree(R"(def @main(%x: Tensor[(1, 8), float32], %w: Tensor[(64, 8), float32], %h: Tensor[(1, 16), float32], %u: Tensor[(64, 16), float32]) {
    tanh(add(nn.dense(%h, %u), nn.dense(%x, %w))) })",
        {random({1, 8}, 38), random({64, 8}, 39), random({1, 16}, 40), random({64, 16}, 41)}, 1);
  // GELU (TVM's erf form, with a division or a multiplication) after a biased product, and alone.
  agree(R"(def @main(%x: Tensor[(3, 16), float32], %w: Tensor[(8, 16), float32], %b: Tensor[(8), float32]) {
    %1 = add(nn.dense(%x, %w), %b);
    %2 = multiply(multiply(%1, add(erf(divide(%1, 1.41421356f)), 1f)), 0.5f);
    multiply(multiply(%2, add(erf(multiply(0.70710678f, %2)), 1f)), 0.5f) })",
        {random({3, 16}, 32), random({8, 16}, 33), random({8}, 34)}, 1);
  agree(R"(def @main(%x: Tensor[(2, 5), float32]) { multiply(0.5f, multiply(add(1f, erf(divide(%x, 1.41421356f))), %x)) })",
        {random({2, 5}, 35)}, 1);
  // nn.matmul in each transposition, with a bias.
  for (const char* t : {"transpose_a=False, transpose_b=False", "transpose_a=True, transpose_b=False",
                        "transpose_a=False, transpose_b=True", "transpose_a=True, transpose_b=True"}) {
    std::string ts = t;
    bool ta = ts.find("transpose_a=True") != std::string::npos, tb = ts.find("transpose_b=True") != std::string::npos;
    std::string a = ta ? "(11, 4)" : "(4, 11)", b = tb ? "(6, 11)" : "(11, 6)";
    agree("def @main(%a: Tensor[" + a + ", float32], %b: Tensor[" + b + ", float32], %c: Tensor[(6), float32]) { add(nn.matmul(%a, %b, " +
              ts + "), %c) }",
          {random(ta ? std::vector<int64_t>{11, 4} : std::vector<int64_t>{4, 11}, 7),
           random(tb ? std::vector<int64_t>{6, 11} : std::vector<int64_t>{11, 6}, 8), random({6}, 9)},
          1);
  }
  // Rows known only at run time: one executable, primitives made per shape.
  std::string dyn = "def @main(%x: Tensor[(?, 33), float32], %w: Tensor[(16, 33), float32], %b: Tensor[(16), float32]) { tanh(add(nn.dense(%x, %w), %b)) }";
  auto lib = compileWith(dyn, true), own = compileWith(dyn, false);
  CHECK(dnnlKernels(*lib) == 1);
  for (int64_t rows : {1, 3, 17, 3}) {
    std::vector<Tensor> args{random({rows, 33}, static_cast<uint32_t>(rows)), random({16, 33}, 10), random({16}, 11)};
    requireClose(run(lib, args), run(own, args));
  }
}

TEST_CASE("dnnl: convolutions with strides, padding, dilation, groups, bias, activations and a residual add") {
  if (!haveDnnl()) return kiln::test::skip("Kiln is built without oneDNN");
  struct Conv {
    const char* attrs;
    int64_t c, o, h, w, groups;
  };
  for (const Conv& cv : {Conv{"padding=[1, 1, 1, 1]", 3, 32, 17, 13, 1}, Conv{"strides=[2, 2], padding=[1, 1, 1, 1]", 32, 64, 16, 16, 1},
                         Conv{"dilation=[2, 2], padding=[2, 1, 2, 1]", 4, 6, 9, 11, 1}, Conv{"groups=2, padding=[1, 1, 1, 1]", 8, 6, 7, 7, 2}}) {
    CAPTURE(cv.attrs);
    std::string shape = "(1, " + std::to_string(cv.c) + ", " + std::to_string(cv.h) + ", " + std::to_string(cv.w) + ")";
    std::string wshape = "(" + std::to_string(cv.o) + ", " + std::to_string(cv.c / cv.groups) + ", 3, 3)";
    std::string src = "def @main(%x: Tensor[" + shape + ", float32], %w: Tensor[" + wshape + ", float32], %b: Tensor[(" +
                      std::to_string(cv.o) + "), float32]) { nn.relu(nn.bias_add(nn.conv2d(%x, %w, " + cv.attrs + "), %b)) }";
    agree(src, {random({1, cv.c, cv.h, cv.w}, 12), random({cv.o, cv.c / cv.groups, 3, 3}, 13), random({cv.o}, 14)}, 1);
  }
  // GELU after a convolution.
  agree(R"(def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(5, 4, 3, 3), float32]) {
    %0 = nn.conv2d(%x, %w);
    multiply(multiply(%0, add(erf(divide(%0, 1.41421356f)), 1f)), 0.5f) })",
        {random({1, 4, 6, 6}, 36), random({5, 4, 3, 3}, 37)}, 1);
  // A residual add of the output's shape (a post-op read in the plain layout), then sigmoid.
  agree(R"(def @main(%x: Tensor[(2, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
    sigmoid(add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]), %x)) })",
        {random({2, 4, 8, 8}, 15), random({4, 4, 3, 3}, 16)}, 1);
  // Two convolutions and a product in one region; an add broadcasting a vector; a lone activation.
  agree(R"(def @main(%x: Tensor[(1, 3, 8, 8), float32], %w1: Tensor[(8, 3, 3, 3), float32], %w2: Tensor[(8, 8, 1, 1), float32], %v: Tensor[(8, 1, 1), float32]) {
    %0 = nn.relu(nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]));
    %1 = nn.conv2d(%0, %w2);
    tanh(add(%1, %v)) })",
        {random({1, 3, 8, 8}, 17), random({8, 3, 3, 3}, 18), random({8, 8, 1, 1}, 19), random({8, 1, 1}, 20)}, 1);
  // A residual block (its input used by the first convolution and the add) and a
  // diamond after it: one region, one kernel.
  agree(R"(def @main(%x: Tensor[(2, 4, 6, 6), float32], %w: Tensor[(4, 4, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32]) {
    %0 = nn.relu(%x);
    %1 = nn.relu(nn.conv2d(%0, %w, padding=[1, 1, 1, 1]));
    %2 = add(nn.conv2d(%1, %w2, padding=[1, 1, 1, 1]), %0);
    add(tanh(%2), sigmoid(%2)) })",
        {random({2, 4, 6, 6}, 42), random({4, 4, 3, 3}, 43), random({4, 4, 3, 3}, 44)}, 1);
  agree(R"(def @main(%x: Tensor[(5, 6), float32], %v: Tensor[(6), float32]) { tanh(add(%v, %x)) })",
        {random({5, 6}, 21), random({6}, 22)}, 1);
}

TEST_CASE("dnnl: constant weights, many VMs and threads, and a saved executable") {
  if (!haveDnnl()) return kiln::test::skip("Kiln is built without oneDNN");
  std::string src = R"(def @main(%x: Tensor[(?, 64), float32], %w: Tensor[(32, 64), float32], %b: Tensor[(32), float32], %k: Tensor[(8, 2, 3, 3), float32]) {
    %0 = nn.relu(add(nn.dense(%x, %w), %b));
    %1 = reshape(%0, newshape=[-1, 2, 4, 4]);
    nn.relu(nn.conv2d(%1, %k, padding=[1, 1, 1, 1])) })";
  std::map<std::string, Tensor> params{{"w", random({32, 64}, 23)}, {"b", random({32}, 24)}, {"k", random({8, 2, 3, 3}, 25)}};
  auto lib = compileWith(src, true, params), own = compileWith(src, false, params);
  CHECK(dnnlKernels(*lib) == 2);
  Tensor want = run(own, {random({5, 64}, 26)});
  // Weights reordered once per kernel and shared: many VMs on threads agree.
  std::vector<std::thread> threads;
  std::vector<Tensor> got(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) got[static_cast<size_t>(t)] = run(lib, {random({5, 64}, 26)});
    });
  for (auto& th : threads) th.join();
  for (const Tensor& g : got) requireClose(g, want);
  // The library is part of the executable: saved and loaded, it runs on dnnl again.
  auto loaded = Executable::fromBytes(lib->serialize());
  CHECK(dnnlKernels(*loaded) == 2);
  requireClose(run(loaded, {random({5, 64}, 26)}), want);
}

TEST_CASE("dnnl: a region dnnl cannot take stays on Kiln with a note - a failure at run time names the library and the kernel") {
  if (!haveDnnl()) return kiln::test::skip("Kiln is built without oneDNN");
  // add of a literal: dnnl takes tensors only.
  std::string lit = "def @main(%x: Tensor[(4), float32]) { add(tanh(%x), 1f) }";
  CompileOptions o;
  o.partition = {"dnnl"};
  compiler::Stages s = compiler::runPasses(lit, "lit.relay", o);
  REQUIRE(s.partitionNotes.size() == 1);
  CHECK(s.partitionNotes[0] == "@dnnl_main_0 runs on Kiln's kernels: dnnl: dnnl_main_0 has a literal operand (dnnl takes tensors)");
  agree(lit, {random({4}, 27)}, 0);

  // Scalars (rank 0) stay on Kiln's host path.
  std::string scalar = "def @main(%x: float32, %y: float32) { add(%x, %y) }";
  s = compiler::runPasses(scalar, "scalar.relay", o);
  REQUIRE(s.partitionNotes.size() == 1);
  CHECK(s.partitionNotes[0].find("dnnl takes tensors of rank 1 to 5") != std::string::npos);

  // Both operands broadcast at run time: oneDNN broadcasts one.
  auto exe = compileWith("def @main(%a: Tensor[(?, ?), float32], %b: Tensor[(?, ?), float32]) { sigmoid(add(%a, %b)) }", true);
  CHECK(dnnlKernels(*exe) == 1);
  requireClose(run(exe, {random({3, 4}, 28), random({1, 4}, 29)}), run(compileWith("def @main(%a: Tensor[(?, ?), float32], %b: Tensor[(?, ?), float32]) { sigmoid(add(%a, %b)) }", false), {random({3, 4}, 28), random({1, 4}, 29)}));
  CHECK_THROWS_WITH_AS(run(exe, {random({1, 4}, 30), random({3, 1}, 31)}),
                       doctest::Contains("dnnl: kernel dnnl_main_0: add broadcasts both operands (dnnl broadcasts one)"), Error);
}
