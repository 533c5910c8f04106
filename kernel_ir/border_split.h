// Splitting loops at the borders of padded windows, so that their interiors run
// without guards (CPU kernels).
//
// A padded window (pooling, the generic convolution) reads
// input[o * stride + k - pad] under guards 0 <= o * stride + k - pad < H that
// fail only for the first and last few outputs of a spatial loop. Kept, the
// guards are evaluated for every element and the load goes through a clamped
// index, which the vectorizer turns into a gather: a ResNet stem's 3x3 stride-2
// max pool over 64x112x112 took 500 us on one core.
//
// This pass splits such a loop (constant extent) into up to three loops over
// fresh variables: a head, an interior offset by the head's length, and a tail.
// It picks the shortest head and tail (each at most kMaxBorder iterations,
// leaving an interior of at least kMinInterior) over which the interior leaves
// as few comparisons undecided as any narrower range would (range_fold.h,
// undecidedComparisons); foldByRanges, run after it, then removes the
// interior's guards and its loads become plain strided ones. Loops inside a
// split loop are split the same way in each piece. The body is copied per piece
// (expressions rebuilt through LoopBuilder with the variable replaced); loops
// inside the copies keep their variables, each bound by one loop per piece.
//
// Only where nothing but element-wise work is inside (no Gemm or Conv2d
// statement), and never a loop without such guards. The GPU keeps its one loop:
// there a split would be more launches, and a guard costs a thread little.
#pragma once

#include "kernel_ir/loop_ir.h"

namespace kiln::loop {

// Longest head or tail a split peels off, and the shortest interior it leaves.
constexpr int64_t kMaxBorder = 8;
constexpr int64_t kMinInterior = 8;

// Rewrites `k` in place; returns how many loops it split.
int splitBorders(LoopKernel& k);

}  // namespace kiln::loop
