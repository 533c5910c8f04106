// Folding by value ranges: guards and selects of a lowered kernel that its loop
// bounds already decide.
//
// Lowering writes window and padding arithmetic for the general case: a pooling
// or convolution window reads input[(oh * stride + kh - pad)] under the guard
// 0 <= oh * stride + kh - pad < H, with a select that clamps the index. Where the
// padding is 0 (or the nest never reaches it) the loops' extents prove the guard,
// but each element still evaluates it, and the select keeps the load from being
// a plain strided one that the vectorizer turns into wide loads (a 2x2 max pool
// ran at 6 ns an output). This pass gives every integer expression an interval
// from the loops around it (a variable of a loop of constant extent E lies in
// [0, E-1], of a run-time extent in [0, +inf); shape dimensions are >= 0) and
// rewrites comparisons it decides into constants; the expressions above them are
// rebuilt through LoopBuilder, whose folds (a select on a constant, `and`/`or`
// with a constant, `x - 0`) take the rest away.
//
// Expressions are rebuilt only where something folds; ids of untouched
// expressions stay. Must run before schedules are applied (it reads each loop
// variable's range from the one loop that binds it).
#pragma once

#include "kernel_ir/loop_ir.h"

namespace kiln::loop {

// Rewrites `k` in place; returns how many comparisons it decided.
int foldByRanges(LoopKernel& k);

// How many integer comparisons in statement `stmt` (its expressions and those
// of the statements inside it) the ranges leave undecided when loop variable
// `var` lies in [lo, hi] and every other variable ranges over its loops.
int undecidedComparisons(const LoopKernel& k, StmtId stmt, int32_t var, int64_t lo, int64_t hi);
// Whether `n` compares integers (the comparisons ranges can decide).
bool isIntComparison(const LoopKernel& k, const ExprNode& n);

}  // namespace kiln::loop
