// The model benchmark's workloads: each a Relay program with deterministic random
// weights, its inputs, and a plain C++ reference that computes the same result in
// double precision, so that every timed run can be checked.
//
// The shapes are those of issue 15's table: an MLP 784-512-512-10 at batch 1 and
// 64, a PyTorch-style LSTM cell (input 128, hidden 256) stepped by a tail-recursive
// loop (static 32 steps, and `?` steps from the input's shape), a small CNN on
// 1x3x64x64, and a binary tree of 64 leaves reduced by recursion.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/executable.h"
#include "kiln/tensor.h"
#include "kiln/value.h"

namespace kiln::bench {

struct Workload {
  std::string name;     // e.g. "mlp_b1"
  std::string program;  // Relay text; @main's weight parameters are bound as constants
  std::vector<std::pair<std::string, Tensor>> weights;  // by parameter name, in ONNX initializer order
  std::vector<std::pair<std::string, Tensor>> inputs;   // @main's other parameters (tensors)
  Tensor expected;                                       // the reference result
  std::string onnxKind;  // what bench/ort/onnx_models.py builds ("": no ONNX counterpart)
  double weightBytes = 0;  // bytes of weights a run streams (per step for loops: times steps)
  int steps = 1;           // weight-streaming steps a run makes (LSTM steps, tree nodes)
  double flops = 0;        // floating-point operations a run does
  bool tree = false;       // the input is the tree of `inputs` leaves, built as ADT values
};

// Every workload, weights drawn from a fixed seed.
std::vector<Workload> makeWorkloads();

// The arguments for @main: the inputs as tensors, or for the tree the BTree value
// built from its leaves (constructor ids from `exe`).
std::vector<Value> workloadArguments(const Workload& w, const Executable& exe);

// Largest |a - b| relative to max(1, |b|) over all elements; shapes must agree (else +inf).
double relativeError(const Tensor& a, const Tensor& b);

}  // namespace kiln::bench
