// Row batching: which kernels can run many independent calls as one call over
// stacked rows, and the kernel that does it.
//
// A tree or a list of small tensors reduced by recursion calls one kernel many
// times with 1 x d rows and the same weights: a 1 x 256 by 256 x 128 product per
// tree node streams the whole weight for 65 K FLOPs. Calls that do not depend on
// one another (the nodes of one tree level) can instead run as one call with
// their rows stacked (B x 256): the weight is streamed once for all of them, and
// a product of B rows runs at the FP32 peak (the VM's RowBatcher, vm/row_batcher.h,
// finds such calls).
//
// A kernel is row-batchable when stacking is exact: its "row" parameters (rank 2
// or more, leading dimension 1) can be stacked along that dimension, every
// result's leading dimension 1 becomes the batch, and every operator keeps row i
// of its results a function of row i of its row operands alone and of its other
// operands whole. That holds for the operators listed in rowBatchPlan's
// definition, checked operator by operator (a sum over the leading dimension, a
// reshape or a transpose would mix rows, so they end a plan; a split across the
// row, an LSTM cell's gates, keeps them). The other
// parameters are shared: every call of a batch passes the same tensors there.
//
// The batched twin is the kernel with the row parameters' leading dimension `?`,
// and every type re-derived by the operators' shape rules: the JIT compiles it
// once and runs it at each batch size. Plans are pure functions of the kernel.
#pragma once

#include <optional>
#include <vector>

#include "kernel_ir/fused_function.h"

namespace kiln::kernel_ir {

struct RowBatchPlan {
  std::vector<bool> rowParam;  // per parameter: stacked (true) or shared
  FusedFunction twin;          // row parameters and results with a `?` leading dimension
};

// The plan for `f`, or nullopt when `f` is not row-batchable: a library kernel,
// `?` dimensions, no row parameter, an operator outside the list, a result that
// is not a row, or an operator that would mix rows.
std::optional<RowBatchPlan> rowBatchPlan(const FusedFunction& f);

}  // namespace kiln::kernel_ir
