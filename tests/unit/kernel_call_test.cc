// CompiledKernel::run over tensor references: the plan a kernel of static shapes
// is called through (operands compared against it, scratch and prepared buffers
// from it) must give the general path's results, and every operand it does not
// match must still be refused with the general path's error.
#include <cmath>
#include <string>

#include "kernel_util.h"

using namespace kiln;

namespace {

// A tree node's kernel: concatenate, dense (a scratch GEMM result), bias, tanh.
constexpr const char* kNode =
    "def @main(%l: Tensor[(1, 5), float32], %r: Tensor[(1, 3), float32], %w: Tensor[(6, 8), float32], "
    "%b: Tensor[(6,), float32]) { tanh(nn.bias_add(nn.dense(concatenate((%l, %r), axis=1), %w, units=6), %b)) }";

Tensor filled(Shape shape, float scale) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * static_cast<float>((i * 7) % 11 - 5);
  return t;
}

std::string errorOf(const jit::CompiledKernel& k, std::vector<const Tensor*> ins, std::vector<const Tensor*> outs) {
  try {
    k.run(jit::CompiledKernel::TensorRefs(ins.data(), ins.size()), jit::CompiledKernel::TensorRefs(outs.data(), outs.size()));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a static kernel called by reference: the results of the general path, and every bad operand refused") {
  auto kernel = test::kernelFrom(kNode);
  Tensor l = filled({1, 5}, 0.1f), r = filled({1, 3}, 0.2f), w = filled({6, 8}, 0.05f), b = filled({6}, 0.3f);
  Tensor out = Tensor::empty(DType::Float32, {1, 6});
  std::vector<const Tensor*> ins{&l, &r, &w, &b}, outs{&out};
  auto run = [&] {
    kernel->run(jit::CompiledKernel::TensorRefs(ins.data(), ins.size()), jit::CompiledKernel::TensorRefs(outs.data(), outs.size()));
  };
  auto check = [&] {
    for (int64_t j = 0; j < 6; ++j) {
      double acc = b.data<float>()[j];
      for (int64_t p = 0; p < 8; ++p) {
        double x = p < 5 ? l.data<float>()[p] : r.data<float>()[p - 5];
        acc += x * w.data<float>()[j * 8 + p];
      }
      CHECK(out.data<float>()[j] == doctest::Approx(std::tanh(acc)).epsilon(1e-5));
    }
  };
  run();
  check();
  // The same result through the general entry (the plan is the reference path's twin).
  std::vector<Tensor> general = (*kernel)(std::vector<Tensor>{l, r, w, b});
  for (int64_t j = 0; j < 6; ++j) CHECK(general[0].data<float>()[j] == out.data<float>()[j]);

  Tensor longer = filled({1, 6}, 0.1f), wrongType = Tensor::empty(DType::Int32, {1, 5}), flat = filled({5}, 0.1f);
  CHECK(errorOf(*kernel, {&longer, &r, &w, &b}, {&out}).find("input 0") != std::string::npos);
  CHECK(errorOf(*kernel, {&wrongType, &r, &w, &b}, {&out}).find("input 0") != std::string::npos);
  CHECK(errorOf(*kernel, {&flat, &r, &w, &b}, {&out}).find("input 0") != std::string::npos);
  CHECK(errorOf(*kernel, {&l, &r, &w}, {&out}).find("4 input(s), but 3") != std::string::npos);
  Tensor wideOut = Tensor::empty(DType::Float32, {1, 7}), intOut = Tensor::empty(DType::Int32, {1, 6}), undefined;
  CHECK(errorOf(*kernel, {&l, &r, &w, &b}, {&wideOut}).find("output 0 must be") != std::string::npos);
  CHECK(errorOf(*kernel, {&l, &r, &w, &b}, {&intOut}).find("output 0 must be") != std::string::npos);
  CHECK(errorOf(*kernel, {&l, &r, &w, &b}, {&undefined}).find("output 0 must be") != std::string::npos);
  CHECK(errorOf(*kernel, {&l, &r, &w, &b}, {&out, &out}).find("1 output(s), but 2") != std::string::npos);
  // A refused call leaves nothing behind: the next good one is right again.
  for (int64_t j = 0; j < 6; ++j) out.data<float>()[j] = NAN;
  run();
  check();
}

// A kernel with `?` rows called with a few row counts by turns (a batched
// twin over a tree's levels), beside another kernel of the same types: each
// call's shapes come from the per-thread memo of its own kernel and shapes,
// never from another entry's, and an output of the wrong rows is still refused.
TEST_CASE("a kernel with ? rows called with several row counts by turns: each call's own shapes") {
  const char* dyn = "def @main(%x: Tensor[(?, 8), float32], %w: Tensor[(6, 8), float32]) { nn.dense(%x, %w, units=6) }";
  auto first = test::kernelFrom(dyn), second = test::kernelFrom(
      "def @main(%x: Tensor[(?, 8), float32], %w: Tensor[(6, 8), float32]) { nn.relu(nn.dense(%x, %w, units=6)) }");
  Tensor w = filled({6, 8}, 0.05f);
  for (int round = 0; round < 3; ++round) {
    for (int64_t rows : {32, 1, 17, 3, 16, 2, 8}) {
      Tensor x = filled({rows, 8}, 0.1f * static_cast<float>(round + 1));
      Tensor a = Tensor::empty(DType::Float32, {rows, 6}), b = Tensor::empty(DType::Float32, {rows, 6});
      std::vector<const Tensor*> ins{&x, &w}, outA{&a}, outB{&b};
      first->run(jit::CompiledKernel::TensorRefs(ins.data(), 2), jit::CompiledKernel::TensorRefs(outA.data(), 1));
      second->run(jit::CompiledKernel::TensorRefs(ins.data(), 2), jit::CompiledKernel::TensorRefs(outB.data(), 1));
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < 6; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < 8; ++p) acc += double(x.data<float>()[i * 8 + p]) * w.data<float>()[j * 8 + p];
          REQUIRE(a.data<float>()[i * 6 + j] == doctest::Approx(acc).epsilon(1e-5));
          REQUIRE(b.data<float>()[i * 6 + j] == doctest::Approx(std::max(acc, 0.0)).epsilon(1e-5));
        }
      Tensor shorter = Tensor::empty(DType::Float32, {rows + 1, 6});
      CHECK(errorOf(*first, {&x, &w}, {&shorter}).find("output 0 must be") != std::string::npos);
    }
  }
}
