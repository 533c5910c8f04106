// The code generator behind an interface, so that the runtime loads LLVM only when
// it has a kernel to compile.
//
// LLVM (the CPU code generator, the NVPTX backend, the optimization pipeline)
// lives in its own shared library, libkiln_codegen.so, built beside the runtime
// library. The runtime never links it: codegenBackend() opens it with dlopen the
// first time a kernel is not found compiled (in memory, in an executable's
// precompiled section, or in the disk cache), and keeps it for the life of the
// process. A process that runs only precompiled or cached kernels therefore never
// maps libLLVM at all, and starts in milliseconds.
//
// What crosses the boundary is plain data: a LoopKernel goes in; a relocatable
// object file (the CPU's machine code, loaded by object_loader.h) or PTX text
// comes out. Both libraries come from one build, so C++ types cross it as they
// are; kCodegenAbiVersion guards against pairing libraries of different builds.
//
// Thread-safety: codegenBackend() may be called from any thread (the library is
// opened once); the backend's methods compile concurrently on different threads.
#pragma once

#include <string>

#include "jit/gpu_plan.h"
#include "kernel_ir/loop_ir.h"

namespace kiln::jit {

// A CPU kernel compiled to machine code, not yet loaded.
struct CpuObject {
  std::string object;       // a relocatable x86-64 ELF object defining the entry point
  std::string optimizedIR;  // the optimized LLVM IR, when asked for
  double optimizeMillis = 0;
  double codegenMillis = 0;
};

// A GPU kernel for the emulated device: its launch plan (PtxModule without PTX)
// and a host object whose one entry, `void symbol(void* const* params, const
// int64_t* which)`, runs launch *which of the plan for one GPU thread
// (codegen/gpu_emulation.h).
struct EmulatedGpuObject {
  PtxModule plan;
  CpuObject object;
};

class CodegenBackend {
 public:
  virtual ~CodegenBackend() = default;
  // Generates, optimizes (-O3 for the host CPU) and compiles `k` into an object
  // defining `void symbol(void* const* buffers, const int64_t* shapes)`. Throws
  // kiln::Error if LLVM rejects it.
  virtual CpuObject compileCpu(const loop::LoopKernel& k, const std::string& symbol, bool keepIR) = 0;
  // `k` as PTX for compute capability `sm`, with its launch plan.
  virtual PtxModule compilePtx(const loop::LoopKernel& k, const std::string& symbol, int sm) = 0;
  // `k` for the emulated CUDA device: the GPU code compiled for the host.
  virtual EmulatedGpuObject compileGpuEmulated(const loop::LoopKernel& k, const std::string& symbol, bool keepIR) = 0;
  // The host as LLVM describes it ("triple|cpu|+feature,..."), for diagnostics.
  virtual std::string hostTargetDescription() = 0;
};

// Bumped whenever CodegenBackend or the types it passes change.
constexpr int kCodegenAbiVersion = 3;

// The code generator, loaded on first use: $KILN_CODEGEN_LIBRARY, else
// libkiln_codegen.so beside the runtime library, else the installed one. Throws
// kiln::Error naming where it looked when none loads.
CodegenBackend& codegenBackend();
// Whether this process has loaded it (and so LLVM); and how long that took.
bool codegenBackendLoaded();
double codegenBackendLoadMillis();

}  // namespace kiln::jit

// The code generator library's one export: its backend, or null when `abiVersion`
// is not its own.
extern "C" kiln::jit::CodegenBackend* kiln_codegen_backend(int abiVersion);
