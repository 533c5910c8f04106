// FusedFunction: the runtime form of one fused kernel — a small dataflow graph of
// operator calls over tensor parameters.
//
// This is what an executable carries for each kernel (not machine code): the
// compiler's fusion pass produces it, and the JIT lowers it to loops and machine
// code on first use. Values are numbered: 0..params-1 are the parameters, then one
// value per node, in topological order. Every node produces one tensor (a field of
// a tuple-producing operator such as split is selected with `field`). Types carry
// `?` (kAnyDim) for dimensions known only at run time.
//
// A FusedFunction is immutable once built and safe to share across threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "kernel_ir/op.h"

namespace kiln::kernel_ir {

// A node is an operator call, or (op == nullptr) a scalar constant of `type`.
struct FusedNode {
  const ops::OpDef* op = nullptr;
  std::vector<int32_t> inputs;  // value ids; for tuple-input operators, the tuple's fields
  ops::AttrMap attrs;
  int32_t field = 0;            // which output of a tuple-producing operator
  ops::TensorDesc type;         // this node's result type
  double floatValue = 0;        // constant nodes: the value (floats)
  int64_t intValue = 0;         // constant nodes: the value (integers and bools)

  bool isConstant() const { return op == nullptr; }
  static FusedNode constant(DType dtype, double floatValue, int64_t intValue);
};

struct FusedFunction {
  std::string name;
  // The external library that runs this kernel (kernel_ir/library_support.h:
  // "dnnl"), or "" for Kiln's own code generator. A library kernel is called as
  // a compiled kernel is (destination passing); the runtime hands it to the library.
  std::string library;
  std::vector<ops::TensorDesc> params;
  std::vector<FusedNode> nodes;
  std::vector<int32_t> outputs;  // value ids of the kernel's results, in order

  size_t numValues() const { return params.size() + nodes.size(); }
  const ops::TensorDesc& typeOf(int32_t value) const;
  bool isParam(int32_t value) const { return value < static_cast<int32_t>(params.size()); }
  const FusedNode& node(int32_t value) const { return nodes[static_cast<size_t>(value) - params.size()]; }

  // Checks ids, operand counts and that every node's type follows from its
  // operator's shape rule. Throws kiln::Error.
  void verify() const;

  // A stable content hash (operators, attributes, types, structure; not the name).
  uint64_t contentHash() const;

  // Relay-like text: `fn (%p0: Tensor[(?, 4), float32]) { %0 = exp(%p0); ... }`.
  std::string toString() const;
};

// The concrete shape of every value, from concrete parameter shapes, by running
// each operator's shape rule (the kernel's run-time shape function). Throws
// kiln::Error when the inputs do not fit the kernel.
std::vector<Shape> computeShapes(const FusedFunction& f, std::span<const Shape> paramShapes);

}  // namespace kiln::kernel_ir
