// The GPU launch plan of a LoopKernel and the PTX module it goes with. The PTX
// itself comes from codegen/nvptx_codegen.h (LLVM's NVPTX backend, over the same
// loop-level representation and LoopEmitter as the CPU), through the code
// generator the runtime loads on demand (jit/codegen_backend.h); the plan is pure
// loop-IR analysis, so a PTX module from the disk cache needs no LLVM.
//
// A kernel becomes one PTX module with an entry point per launch and a plan the
// host walks (PtxStep): launches in order on one stream (a launch boundary is
// the only grid-wide barrier), branches on shapes decided on the host, and host
// loops around statements that need launches of their own (a convolution's
// per-image unfold and product). Each entry takes the kernel's buffers as
// global pointers in the CPU's order, then the run-time shape array by value
// (a kernel parameter, so no copy precedes a launch), then one int64 per host
// loop variable (PtxModule::hostVars). Mappings:
//   - Flat: a nest of loops whose extents do not depend on each other is
//     collapsed to one index, grid-stride, so neighbouring threads touch
//     neighbouring elements (coalesced);
//   - Rows: a nest whose body reduces over many elements: a block of threads per
//     row (grid-stride over rows); reductions are split over the block's
//     threads and combined with warp shuffles and shared memory; the row's
//     inner loops are shared out among the block's threads, with a barrier
//     after each;
//   - Gemm: a 128x128 tile of C per block, staged through shared memory in
//     K-slices of 8, 8x8 results per thread in registers; a batch in grid z.
//     Each Gemm launch has a second entry (skinnyEntry) that the host takes
//     when C has at most kGpuSkinnyRows rows: a warp per column of C, its lanes
//     splitting K (a batch-1 layer of 512 outputs had 4 tiles, so 4 of an H200's
//     132 multiprocessors did the work: 128 us for 2x784 by 784x512);
//   - Single: anything else runs on one thread (correct, and rare).
// Float32 exp, log, tanh, sigmoid and erf use vector_math's approximations (plain
// IR); what NVPTX cannot select itself (sin, cos, pow, and float64
// transcendentals) calls libdevice, linked from the CUDA toolkit with only the
// functions used.
#pragma once

#include <string>
#include <vector>

#include "kernel_ir/loop_ir.h"

namespace kiln::jit {

enum class GpuMapping : uint8_t { Flat, Rows, Gemm, Single };
// Threads per block of Flat, Rows and Gemm launches (Single: one).
constexpr uint32_t kGpuBlockThreads = 256;
const char* gpuMappingName(GpuMapping m);

struct PtxLaunch {
  std::string entry;
  GpuMapping mapping = GpuMapping::Single;
  loop::StmtId stmt = -1;  // the statement it runs
  // Flat and Rows: the collapsed loops (outermost first) whose iterations (the
  // product of their extents) are the launch's work; the host computes the
  // extents where it can, else the launch takes a fixed grid, which the
  // grid-stride loops make correct for any extent. Rows with no loops: one row.
  std::vector<int32_t> loopVars;
  std::vector<loop::ExprId> extents;
  // Gemm: the loop whose iterations are the batch (grid z), or -1.
  int32_t batchVar = -1;
  loop::ExprId batch = -1;
  uint32_t blockThreads = kGpuBlockThreads;
};

struct PtxStep {
  enum class Kind : uint8_t { Launch, If, Loop } kind = Kind::Launch;
  int32_t launch = -1;     // Launch: index into PtxModule::launches
  loop::ExprId expr = -1;  // If: condition; Loop: extent (both host-evaluable)
  int32_t var = -1;        // Loop: its variable, passed to the entries inside
  std::vector<PtxStep> body, orElse;
};

struct PtxModule {
  std::string ptx;
  int sm = 0;                      // compute capability it was generated for (90: sm_90)
  std::vector<PtxLaunch> launches;  // entry points
  std::vector<PtxStep> steps;       // what the host runs, in order
  std::vector<int32_t> hostVars;    // loop variables passed to every entry, in order
};

// Products with at most this many rows take a Gemm launch's skinny entry.
constexpr int64_t kGpuSkinnyRows = 16;
// Columns of C per block of the skinny entry: a warp each.
constexpr uint32_t kGpuSkinnyColumnsPerBlock = kGpuBlockThreads / 32;
inline std::string skinnyEntry(const PtxLaunch& l) { return l.entry + "_skinny"; }
// Every entry point the module defines: each launch's, then the skinny entries
// of its Gemm launches.
std::vector<std::string> entryPoints(const PtxModule& m);

// The newest compute capability LLVM 19 generates code for.
constexpr int kMaxPtxSm = 90;

// The same module without its PTX (cheap: a disk-cache hit needs only this).
PtxModule planPtx(const loop::LoopKernel& k, const std::string& symbol);

// The host's plan as comment lines: launches with their mappings, host
// branches and host loops, indented by nesting.
std::string describePlan(const PtxModule& m);

}  // namespace kiln::jit
