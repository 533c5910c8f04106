// Kernel merging: a kernel whose results feed the element-wise kernel bound right
// after it joins that kernel, as one kernel with several results.
//
// Fusion (fuse_ops.h) joins a producer to its consumer only when the consumer is
// its only use. An LSTM cell's step is three kernels that way: the gates'
// product and split (`let %s = ...`), the new cell state (`let %c2 = f(%s.0,
// %s.1, %s.2, %c)`, used by the next step as well as by %h2) and the new hidden
// state (`let %h2 = g(%s.3, %c2)`). Here a chain of such bindings, each kernel
// reading results of the ones before it, becomes one kernel called where the
// last one was, returning every result still used after it as a field of a
// tuple: `let %k = kernel(...); let %c2 = %k.0; let %h2 = %k.1`. The JIT's
// lowering computes each element once per loop nest and stores it to every
// output that needs it, so the cell is one call with one product and one
// element-wise pass.
//
// What may merge, so that the lowering still has one matrix product at most and
// every element-wise value stays inlined at the same index:
// - a chain starts at a kernel of element-wise, broadcast and injective operators
//   with at most dense/matmul/batch_matmul products (no reductions, convolutions
//   or opaque operators, which have lowerings of their own);
// - a kernel joins it when it is element-wise and broadcast operators alone, with
//   one tensor result, its arguments variables, constants or fields of variables
//   (nothing computed between the bindings), and every value it reads from the
//   chain of exactly its own static shape (nothing broadcast, so nothing is
//   recomputed per element);
// - the bindings are consecutive in one let chain, so every other use of a
//   chain result comes after the merged call;
// - only kernels the fusion pass made (one call site each) merge: a kernel
//   written as Primitive=1 keeps its own function.
// On a GPU the merged kernel is the product's launch and one element-wise launch
// for all its results (jit/gpu_plan.h), where the chain was a launch per kernel.
#pragma once

#include <unordered_set>

#include "compiler/ir/expr.h"

namespace kiln::compiler {

// `body`, a function body after fusion, with its chains merged; `mergeable`: the
// primitive functions fusion made for it.
const ir::Expr* mergeKernelChains(ir::Arena& arena, const ir::Expr* body,
                                  const std::unordered_set<const ir::Function*>& mergeable);

}  // namespace kiln::compiler
