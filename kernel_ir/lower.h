// Lowering: a FusedFunction to the loop-level representation.
//
// Each output gets one loop nest over its elements; every operator on the way is
// inlined through its compute rule, so the kernel makes one pass over memory.
// Buffers are the parameters then the outputs, in order. The run-time shape array
// holds every value's dimensions (parameters, then nodes), as computeShapes gives
// them; static dimensions are compiled in as constants and never read from it.
#pragma once

#include "kernel_ir/fused_function.h"
#include "kernel_ir/loop_ir.h"

namespace kiln::kernel_ir {

// Offsets of each value's dimensions in the run-time shape array.
std::vector<int32_t> shapeSlots(const FusedFunction& f, int32_t* total = nullptr);

struct LowerOptions {
  // float32 NCHW/OIHW convolutions as one Conv2d statement (the CPU runtime's
  // direct convolution) instead of an unfold into a column buffer and a Gemm.
  bool directConv = false;
  // A dense layer's bias and ReLU applied by the CPU runtime's GEMM as it
  // finishes C (jit::GemmPost) instead of a loop nest over C afterwards.
  bool gemmPostOps = false;
  // Loops at the borders of padded windows split so that their interiors run
  // without guards (kernel_ir/border_split.h): CPU kernels.
  bool splitBorders = false;
  // Every output only written, never read back by the kernel: a row softmax
  // computes exp(x - max) twice (for the sum, then for the result) instead of
  // storing it and scaling it in place. What streaming stores need
  // (loop::Schedule::streamingStores): a line read back is a line fetched.
  bool outputsWriteOnly = false;
};

// Throws kiln::Error when an operator in `f` has no lowering yet.
loop::LoopKernel lowerToLoops(const FusedFunction& f, const LowerOptions& options = {});

}  // namespace kiln::kernel_ir
