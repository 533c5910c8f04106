// Compute rules: each operator's lowering to the loop-level representation,
// written beside its shape rule so an operator is defined in one place.
//
// A compute rule says what one output element is, given a way to read its
// operands at any index. Fusion is composition: when an operand is itself the
// result of another operator in the same kernel, `load` inlines that operator's
// compute rule at the requested index, so a fused chain becomes one expression
// evaluated in one pass over memory.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "kernel_ir/loop_ir.h"
#include "kernel_ir/op.h"

namespace kiln::ops {

struct ComputeCall {
  const OpDef& op;
  AttrReader attrs;
  std::span<const TensorDesc> inputs;  // operand types (`?` where dynamic)
  const TensorDesc& output;            // this operator's result type
  loop::LoopBuilder& b;
  std::span<const loop::ExprId> index;  // the output element to compute, one Int64 per dimension
  int32_t field;                        // which result of a tuple-producing operator (split)
  // Operand k's value at a multi-index (one Int64 expression per dimension of operand k).
  std::function<loop::ExprId(size_t k, std::span<const loop::ExprId> index)> load;
  // Extent of dimension d of operand k / of the result (a constant where static).
  std::function<loop::ExprId(size_t k, size_t d)> inputDim;
  std::function<loop::ExprId(size_t d)> outputDim;
  // When set, lowering is building the fast version of a kernel: a `?` dimension
  // is assumed not to broadcast, and each such assumption is appended here as a
  // condition that the kernel checks at run time before taking the fast version.
  std::vector<loop::ExprId>* noBroadcastGuards = nullptr;
};

// Row-major multi-index of a flat position within operand k's shape.
std::vector<loop::ExprId> unflatten(const ComputeCall& c, size_t k, loop::ExprId flat);
// Row-major flat position of `index` within the result's shape.
loop::ExprId flattenOutput(const ComputeCall& c, std::span<const loop::ExprId> index);
// Product of operand k's extents (Int64).
loop::ExprId operandSize(const ComputeCall& c, size_t k);

// `index` where `ok` holds, all zeros elsewhere: a read guarded by a select then
// never leaves its buffer (element 0 is always readable, see kiln/tensor.h).
std::vector<loop::ExprId> guardIndex(const ComputeCall& c, loop::ExprId ok, std::vector<loop::ExprId> index);

// Operand k's index for the current output element under numpy broadcasting:
// dimensions of extent 1 read index 0; a `?` dimension decides at run time.
std::vector<loop::ExprId> broadcastIndex(const ComputeCall& c, size_t k);

}  // namespace kiln::ops
