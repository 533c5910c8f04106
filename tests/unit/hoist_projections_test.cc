// hoistLoopProjections: a counting loop's input projection computed once, before
// the loop, for every step; results as before; loops it must not touch left alone.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "compiler/ir/printer.h"
#include "compiler/pipeline.h"
#include "kiln/compile.h"
#include "kiln/vm.h"
#include "kernel_util.h"

namespace {

using kiln::DType;
using kiln::Tensor;
using kiln::Value;

// An LSTM-like recurrence over the steps of %xs: the input projection of step %t
// is dense(take(%xs, %t, axis=0), %w); `steps` and `index` vary the program.
std::string recurrence(const std::string& steps, const std::string& next, const std::string& take = "take(%xs, %t, axis=0)") {
  return "def @main(%xs: Tensor[(" + steps + ", 2, 24), float32], %w: Tensor[(40, 24), float32], %u: Tensor[(40, 40), float32],"
         "          %b: Tensor[(40), float32], %n: int32) {\n"
         "  let %loop = fn (%t: int32, %h: Tensor[(2, 40), float32]) -> Tensor[(2, 40), float32] {\n"
         "    if (%t == %n) { %h } else {\n"
         "      let %x = " + take + ";\n"
         "      let %g = add(nn.bias_add(nn.dense(%x, %w), %b), nn.dense(%h, %u));\n"
         "      %loop(" + next + ", tanh(%g))\n"
         "    }\n"
         "  };\n"
         "  %loop(0, zeros(shape=[2, 40], dtype=\"float32\"))\n"
         "}\n";
}

std::string fusedText(const std::string& src, bool hoist) {
  kiln::CompileOptions o;
  o.hoistLoopProjections = hoist;
  auto stages = kiln::compiler::runPasses(src, "hoist.relay", o);
  kiln::ir::PrintOptions typed;
  typed.showTypes = true;
  return kiln::ir::printModule(*stages.fused, typed);
}

Tensor run(const std::string& src, bool hoist, const Tensor& xs, const std::vector<Tensor>& w, int32_t n) {
  kiln::CompileOptions o;
  o.hoistLoopProjections = hoist;
  kiln::VirtualMachine vm(kiln::compile(src, "hoist.relay", o));
  return vm.invoke("main", {Value(xs), Value(w[0]), Value(w[1]), Value(w[2]), Value::intScalar(DType::Int32, n)}).tensor();
}

void checkSame(const std::string& src, int64_t steps, int32_t n) {
  std::mt19937 rng(5);
  Tensor xs = kiln::test::randomTensor(DType::Float32, {steps, 2, 24}, rng, -1, 1);
  std::vector<Tensor> w = {kiln::test::randomTensor(DType::Float32, {40, 24}, rng, -0.2, 0.2),
                           kiln::test::randomTensor(DType::Float32, {40, 40}, rng, -0.2, 0.2),
                           kiln::test::randomTensor(DType::Float32, {40}, rng, -0.2, 0.2)};
  Tensor want = run(src, false, xs, w, n), got = run(src, true, xs, w, n);
  REQUIRE(got.shape() == want.shape());
  for (int64_t i = 0; i < got.numel(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got.data<float>()[i] - want.data<float>()[i]) <= 1e-5f);
  }
}

}  // namespace

TEST_CASE("hoist: a counting loop's input projection is one product before the loop") {
  std::string src = recurrence("7", "add(%t, 1)");
  std::string text = fusedText(src, true);
  CAPTURE(text);
  // The product of every step, [7 * 2, 24] x [40, 24]^T, bound before the loop...
  CHECK(text.find("let %xs_projected0: Tensor[(7, 2, 40), float32]") != std::string::npos);
  CHECK(text.find("-> Tensor[(14, 40), float32] {\n    nn.dense(") != std::string::npos);
  // ...and the step takes its block; no product of a step's slice is left, nor the slice.
  CHECK(text.find("take(%p0") != std::string::npos);
  CHECK(text.find("Tensor[(2, 24), float32]") == std::string::npos);
  CHECK(fusedText(src, false).find("xs_projected") == std::string::npos);
  checkSame(src, 7, 7);
  // Steps beyond the tensor are clamped by take, before and after.
  checkSame(src, 7, 9);
  // A slice the loop also uses otherwise stays bound.
  std::string shared = recurrence("7", "add(%t, 1)");
  shared.replace(shared.find("nn.dense(%h, %u))"), 17, "nn.dense(%h, %u)) + sum(%x)");
  CHECK(fusedText(shared, true).find("let %xs_projected0") != std::string::npos);
  checkSame(shared, 7, 7);
  // `?` steps: the product's rows come from the run-time shape.
  std::string dynamic = recurrence("?", "add(1, %t)");
  CHECK(fusedText(dynamic, true).find("let %xs_projected0: Tensor[(?, 2, 40), float32]") != std::string::npos);
  checkSame(dynamic, 5, 5);
}

TEST_CASE("hoist: loops it must not change are left alone") {
  // The index does not count (the loop halves it), the slice comes from a value
  // the loop computes, the slice's index is not the counter itself: no projection moves.
  for (const std::string& src :
       {recurrence("7", "divide(%t, 2)"), recurrence("7", "add(%t, 1)", "take(%xs * 2f, %t, axis=0)"),
        recurrence("7", "add(%t, 1)", "take(%xs, subtract(subtract(%n, %t), 1), axis=0)")}) {
    CAPTURE(src);
    CHECK(fusedText(src, true).find("_projected") == std::string::npos);
  }
  // Every step's block held at once would take 320 MB: left in the loop.
  std::string big = recurrence("100000", "add(%t, 1)");
  for (auto [from, to] : {std::pair<std::string, std::string>{"Tensor[(40, 24)", "Tensor[(400, 24)"},
                          {"Tensor[(40, 40)", "Tensor[(400, 400)"}, {"Tensor[(40)", "Tensor[(400)"},
                          {"Tensor[(2, 40)", "Tensor[(2, 400)"}, {"shape=[2, 40]", "shape=[2, 400]"}})
    for (size_t at; (at = big.find(from)) != std::string::npos;) big.replace(at, from.size(), to);
  CAPTURE(big);
  CHECK(fusedText(big, true).find("_projected") == std::string::npos);
}
