// GPU code generation: a LoopKernel to PTX through LLVM's NVPTX backend (the
// module's plan is jit/gpu_plan.h's). Part of the code generator library.
#pragma once

#include <string>

#include "jit/gpu_plan.h"

namespace kiln::jit {

// Lowers `k` to PTX for compute capability `sm` (capped at kMaxPtxSm). Throws
// kiln::Error when LLVM rejects it or libdevice is needed and missing.
PtxModule emitPtx(const loop::LoopKernel& k, const std::string& symbol, int sm = kMaxPtxSm);

// Where libdevice is looked for: $KILN_LIBDEVICE, else the CUDA toolkit found at
// build time.
std::string libdevicePath();

}  // namespace kiln::jit
