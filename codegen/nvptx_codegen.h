// GPU code generation: a LoopKernel to PTX through LLVM's NVPTX backend (the
// module's plan is jit/gpu_plan.h's). Part of the code generator library.
#pragma once

#include <memory>
#include <string>

#include "jit/gpu_plan.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace kiln::jit {

// Lowers `k` to PTX for compute capability `sm` (capped at kMaxPtxSm). Throws
// kiln::Error when LLVM rejects it or libdevice is needed and missing.
PtxModule emitPtx(const loop::LoopKernel& k, const std::string& symbol, int sm = kMaxPtxSm);

// The GPU LLVM IR of `k` under `plan` (an entry per launch, PTX_Kernel calling
// convention, GPU intrinsics, shared memory in address space 3, libdevice
// declarations), verified, before libdevice is linked or NVPTX's passes run:
// what emitPtx hands the NVPTX backend, and what the emulated device compiles
// for the host (gpu_emulation.h).
std::unique_ptr<llvm::Module> emitGpuModule(const loop::LoopKernel& k, const std::string& symbol, const PtxModule& plan,
                                            llvm::LLVMContext& ctx);

// Where libdevice is looked for: $KILN_LIBDEVICE, else the CUDA toolkit found at
// build time.
std::string libdevicePath();

}  // namespace kiln::jit
