// Row batching (kernel_ir/row_batching.h): which kernels may run stacked rows,
// the batched twin's types, and the twin's results against the kernel run once
// per row.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "jit/kernel.h"
#include "kernel_ir/row_batching.h"
#include "kiln/compile.h"
#include "kiln/executable.h"

namespace {

using kiln::Tensor;
using kiln::kernel_ir::FusedFunction;
using kiln::kernel_ir::rowBatchPlan;

// The one kernel of a program whose @main is `body` over the given parameters.
const FusedFunction& onlyKernel(const std::shared_ptr<const kiln::Executable>& exe) {
  REQUIRE(exe->kernels().size() == 1);
  return *exe->kernels()[0].function;
}

std::shared_ptr<const kiln::Executable> program(const std::string& params, const std::string& result, const std::string& body) {
  return kiln::compile("def @main(" + params + ") -> " + result + " {\n  " + body + "\n}\n");
}

Tensor filled(std::vector<int64_t> shape, int seed) {
  Tensor t = Tensor::empty(kiln::DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(0.37f * static_cast<float>(i + 13 * seed));
  return t;
}

}  // namespace

TEST_CASE("row batching: a tree node's kernel stacks its rows and shares its weights") {
  auto exe = program("%l: Tensor[(1, 8), float32], %r: Tensor[(1, 8), float32], %w: Tensor[(8, 16), float32], %b: Tensor[(8,), float32]",
                     "Tensor[(1, 8), float32]",
                     "tanh(nn.bias_add(nn.dense(concatenate((%l, %r), axis=1), %w, units=8), %b))");
  const FusedFunction& f = onlyKernel(exe);
  auto plan = rowBatchPlan(f);
  REQUIRE(plan);
  CHECK(plan->rowParam == std::vector<bool>{true, true, false, false});
  CHECK(plan->twin.params[0].shape[0] == kiln::ops::kAnyDim);
  CHECK(plan->twin.params[2].shape == f.params[2].shape);
  CHECK(plan->twin.typeOf(plan->twin.outputs[0]).shape == kiln::ops::Shape{kiln::ops::kAnyDim, 8});
  plan->twin.verify();

  // The twin over 5 stacked rows gives, row by row, what the kernel gives for each.
  kiln::jit::KernelCache cache;
  auto one = cache.get(f);
  auto twin = cache.get(plan->twin);
  Tensor w = filled({8, 16}, 1), b = filled({8}, 2);
  constexpr int kRows = 5;
  Tensor ls = filled({kRows, 8}, 3), rs = filled({kRows, 8}, 4), outs = Tensor::empty(kiln::DType::Float32, {kRows, 8});
  twin->run(std::vector<Tensor>{ls, rs, w, b}, std::vector<Tensor>{outs});
  for (int i = 0; i < kRows; ++i) {
    Tensor l = Tensor::empty(kiln::DType::Float32, {1, 8}), r = Tensor::empty(kiln::DType::Float32, {1, 8});
    Tensor out = Tensor::empty(kiln::DType::Float32, {1, 8});
    std::copy_n(ls.data<float>() + i * 8, 8, l.data<float>());
    std::copy_n(rs.data<float>() + i * 8, 8, r.data<float>());
    one->run(std::vector<Tensor>{l, r, w, b}, std::vector<Tensor>{out});
    for (int j = 0; j < 8; ++j) CHECK(outs.data<float>()[i * 8 + j] == doctest::Approx(out.data<float>()[j]).epsilon(1e-5));
  }
}

TEST_CASE("row batching: element-wise, broadcast and softmax over the row keep rows apart") {
  auto exe = program("%x: Tensor[(1, 4, 6), float32], %s: Tensor[(4, 6), float32], %t: Tensor[(1, 1, 6), float32]",
                     "Tensor[(1, 4, 6), float32]", "sigmoid(%x) * %s + %t");
  auto plan = rowBatchPlan(onlyKernel(exe));
  REQUIRE(plan);
  // A one-row parameter of the result's rank is stacked too (each call passes its own).
  CHECK(plan->rowParam == std::vector<bool>{true, false, true});
  auto softmax = program("%x: Tensor[(1, 4, 6), float32]", "Tensor[(1, 4, 6), float32]", "nn.softmax(%x, axis=-1)");
  CHECK(rowBatchPlan(onlyKernel(softmax)));
  // An LSTM cell's gates: a split across the row, each field a result.
  auto gates = program("%x: Tensor[(1, 8), float32]", "(Tensor[(1, 4), float32], Tensor[(1, 4), float32])",
                       "split(exp(%x), indices_or_sections=2, axis=1)");
  auto gatesPlan = rowBatchPlan(onlyKernel(gates));
  REQUIRE(gatesPlan);
  CHECK(gatesPlan->twin.typeOf(gatesPlan->twin.outputs[1]).shape == kiln::ops::Shape{kiln::ops::kAnyDim, 4});
}

TEST_CASE("row batching: kernels that mix rows or have no rows have no plan") {
  // One kernel per result and one that squares %a for three of them: the others
  // mix rows or broadcast a row over a taller operand.
  auto exe = kiln::compile(R"(
def @main(%a: Tensor[(1, 8), float32], %m: Tensor[(3, 8), float32], %w: Tensor[(1, 8), float32])
    -> (Tensor[(1, 8), float32], Tensor[(8), float32], Tensor[(8, 1), float32], Tensor[(1, 1), float32], Tensor[(3, 8), float32]) {
  (nn.softmax(%a * %a, axis=0), sum(%a * %a, axis=[0]), reshape(%a * %a, newshape=[8, 1]), nn.dense(%a * %a, %w, units=1), %a * %a + %m)
}
)");
  // Each kernel by the operator that ends it; the square alone is the control.
  std::map<std::string, const FusedFunction*> byLast;
  for (const auto& k : exe->kernels()) byLast[k.function->nodes.back().op->name] = k.function.get();
  REQUIRE(exe->kernels().size() == 6);
  REQUIRE(byLast.count("multiply"));
  CHECK(rowBatchPlan(*byLast["multiply"]));
  for (std::string op : {"nn.softmax", "sum", "reshape", "nn.dense", "add"}) {
    CAPTURE(op);
    REQUIRE(byLast.count(op));
    CHECK_FALSE(rowBatchPlan(*byLast[op]));
  }
  auto concat = program("%a: Tensor[(1, 8), float32], %b: Tensor[(1, 8), float32]", "Tensor[(2, 8), float32]",
                        "concatenate((%a, %b), axis=0)");
  CHECK_FALSE(rowBatchPlan(onlyKernel(concat)));
  auto noRows = program("%a: Tensor[(4, 8), float32]", "Tensor[(4, 8), float32]", "exp(%a)");
  CHECK_FALSE(rowBatchPlan(onlyKernel(noRows)));
}
