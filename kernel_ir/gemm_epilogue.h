// Whether the loop right after a GEMM reads the product by column groups, so
// that each thread of the product can run it on the columns it made itself
// (jit::GemmEpilogue).
//
// The case this is for is a merged LSTM step (compiler/passes/merge_kernels.h):
// `gemm tmp = h * W^T (1 x 4H)` and then one element-wise loop over the H hidden
// units whose iteration j reads the four gates tmp[j], tmp[j + H], tmp[j + 2H]
// and tmp[j + 3H]. Run after the whole product on the calling thread, that loop
// reads the other threads' halves of tmp across cores and is itself serial; run
// per thread on the hidden units whose gates that thread computed, it is split
// as the product is and reads only its own results. The same holds for any
// `dense` followed by an element-wise pass over its columns (one group).
#pragma once

#include <cstdint>
#include <optional>

#include "kernel_ir/loop_ir.h"

namespace kiln::loop {

// For a Gemm statement `gemm` and the For statement `loop` that follows it in the
// same block: the number of column groups G of C that the loop reads by, or
// nullopt where it may not run per column group. It may when
//  - the product is one row (m = 1) of n = N columns, both constants, reads a B
//    the runtime may have prepacked (packedB >= 0), has no post-ops, does not
//    transpose A and does not accumulate, and C's offset is a constant c0;
//  - the loop is parallel (its iterations are independent) over a constant
//    extent S with S * G = N;
//  - every read of C anywhere in the loop is at c0 + v + g * S, with v the
//    loop's variable and 0 <= g < G a constant, and nothing in the loop writes C
//    or runs another product or convolution.
std::optional<int64_t> epilogueColumnGroups(const LoopKernel& k, const StmtNode& gemm, const StmtNode& loop);

}  // namespace kiln::loop
