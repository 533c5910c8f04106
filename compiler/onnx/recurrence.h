// Loops as Relay text: a tail-recursive local function over an iteration counter.
//
//   let %loop = fn (%i: int64, %cond: bool, carried..., scans...) -> (carried..., scans...) {
//     if (%i < count && %cond) { body...; %loop(%i + 1, next_cond, next_carried..., scans ++ [element]...) }
//     else { (carried..., scans...) }
//   };
//   let %r = %loop(0i64, cond_init, carried_init..., empty scans...);
//
// Each scan accumulator is a growing tensor Tensor[(?, element dims...)] that starts
// empty, so results are tensors as ONNX's Loop, Scan and the recurrent operators
// define them. ONNX's Loop and Scan and the LSTM, GRU and RNN operators all build
// one of these.
#pragma once

#include <string>
#include <vector>

#include "compiler/onnx/graph_importer.h"

namespace kiln::onnx_import {

struct Recurrence {
  std::string fn, i, cond;          // the function's and its counter's and condition's names (with %)
  std::string count;                // an int64 scalar bounding the iterations; "" for none
  std::string condInit = "True";    // the condition before the first iteration
  std::vector<Value> carried;       // parameters: ref is the parameter's name, with its type
  std::vector<std::string> carriedInit;
  std::vector<Value> scans;         // accumulators (ref and type Tensor[(?, ...)])
  // The body: lines, then the next condition, carried values and scan elements.
  std::vector<std::string> bodyLines;
  std::string nextCond;             // "" keeps the condition
  std::vector<std::string> nextCarried, scanElements;
};

// An imported subgraph (If's branches, Loop's, Scan's and SequenceMap's bodies):
// its lines, and its outputs as Relay expressions and values.
struct SubgraphBody {
  std::vector<std::string> lines;
  std::vector<std::string> outputs;
  std::vector<Value> values;
};
// Imports `g` in a scope of its own under the node's, its inputs bound to `inputs`.
SubgraphBody importSubgraph(NodeContext& c, const onnx::GraphProto& g, const std::vector<Value>& inputs);

// Fresh names for a recurrence's function, counter and condition.
Recurrence newRecurrence(ImportState& st);
// An accumulator for elements of `elem` (static shape), named freshly.
Value scanAccumulator(ImportState& st, DType dtype, const std::vector<int64_t>& elem);
// Writes the function into the node's scope; returns the variable holding the
// result: the carried values then the scans (a tuple, or the one value alone).
std::string emitRecurrence(NodeContext& c, const Recurrence& r);
// `{ lines... result }`, a Relay block.
std::string blockText(const std::vector<std::string>& lines, const std::string& result);
// `a` alone, or `(a, b, ...)`.
std::string tupleText(const std::vector<std::string>& v);

}  // namespace kiln::onnx_import
