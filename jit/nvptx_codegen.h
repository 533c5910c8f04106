// GPU code generation: a LoopKernel to PTX through LLVM's NVPTX backend, over
// the same loop-level representation (and the same LoopEmitter) as the CPU.
//
// A kernel becomes one PTX module with one entry point per top-level statement,
// launched in order on one stream (a launch boundary is the only grid-wide
// barrier). Each entry takes the kernel's buffers as global pointers, in the
// CPU's order, then a pointer to the run-time shape array in device memory:
//   - an outermost parallel loop runs grid-stride: thread t of T takes
//     iterations t, t + T, ...; inner loops and reductions run in the thread;
//   - a Gemm runs one thread per element of C;
//   - anything else (a serial statement) runs on thread 0 of a one-block launch.
// Float32 exp, log, tanh, sigmoid and erf use vector_math's approximations (plain
// IR); what NVPTX cannot select itself (sin, cos, pow, and float64
// transcendentals) calls libdevice, linked from the CUDA toolkit with only the
// functions used.
#pragma once

#include <string>
#include <vector>

#include "jit/loop_ir.h"

namespace kiln::jit {

struct PtxLaunch {
  std::string entry;
  enum class Shape : uint8_t { Grid, Single } shape;  // grid-stride, or thread 0 of one block
};

struct PtxModule {
  std::string ptx;
  int sm = 0;                      // compute capability it was generated for (90: sm_90)
  std::vector<PtxLaunch> launches;  // in order
};

// The newest compute capability LLVM 19 generates code for.
constexpr int kMaxPtxSm = 90;

// Lowers `k` to PTX for compute capability `sm` (capped at kMaxPtxSm). Throws
// kiln::Error when LLVM rejects it or libdevice is needed and missing.
PtxModule emitPtx(const loop::LoopKernel& k, const std::string& symbol, int sm = kMaxPtxSm);

// Where libdevice is looked for: $KILN_LIBDEVICE, else the CUDA toolkit found at
// build time.
std::string libdevicePath();

}  // namespace kiln::jit
