// The model bench's tree at a size a test runs quickly: 1 x 8 leaves reduced
// by recursion, node = tanh(dense(concat(l, r)) + b), with the reduction in
// double precision beside it (fork_test.cc, row_batcher_test.cc).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kiln/executable.h"
#include "kiln/runtime.h"
#include "kiln/tensor.h"
#include "kiln/value.h"

namespace kiln::test {

inline const char* kTree = R"(
type BTree { BLeaf(Tensor[(1, 8), float32]), BNode(BTree, BTree) }
def @main(%t: BTree, %w: Tensor[(8, 16), float32], %b: Tensor[(8,), float32]) -> Tensor[(1, 8), float32] {
  let %reduce = fn (%n: BTree) -> Tensor[(1, 8), float32] {
    match %n {
      BLeaf(%v) => %v,
      BNode(%l, %r) => tanh(nn.bias_add(nn.dense(concatenate((%reduce(%l), %reduce(%r)), axis=1), %w, units=8), %b)),
    }
  };
  %reduce(%t)
}
)";

inline Tensor filled(std::vector<int64_t> shape, float scale, int seed) {
  Tensor t = Tensor::empty(kiln::DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * std::sin(0.37f * static_cast<float>(i + 11 * seed));
  return t;
}

struct Tree {
  Value value;
  std::vector<double> expected;  // the same reduction in double precision
};

// A full tree of 2^depth leaves.
inline Tree buildTree(const kiln::Executable& exe, int depth, const Tensor& w, const Tensor& b, int& seed) {
  if (depth == 0) {
    Tensor leaf = filled({1, 8}, 1.0f, seed++);
    return {Value::adt(static_cast<uint32_t>(exe.constructorId("BLeaf")), {Value(leaf)}),
            std::vector<double>(leaf.data<float>(), leaf.data<float>() + 8)};
  }
  Tree l = buildTree(exe, depth - 1, w, b, seed), r = buildTree(exe, depth - 1, w, b, seed);
  std::vector<double> x(l.expected);
  x.insert(x.end(), r.expected.begin(), r.expected.end());
  std::vector<double> y(8);
  for (int i = 0; i < 8; ++i) {
    double s = b.data<float>()[i];
    for (int k = 0; k < 16; ++k) s += w.data<float>()[i * 16 + k] * x[static_cast<size_t>(k)];
    y[static_cast<size_t>(i)] = std::tanh(s);
  }
  return {Value::adt(static_cast<uint32_t>(exe.constructorId("BNode")), {l.value, r.value}), y};
}

inline std::shared_ptr<kiln::Runtime> runtimeWith(int threads) {
  kiln::RuntimeOptions o;
  o.numThreads = threads;
  return kiln::Runtime::create(o);
}

}  // namespace kiln::test
