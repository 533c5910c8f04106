// The emulated CUDA device's compile step: a kernel's GPU LLVM IR — the module
// NvptxCodegen builds and NVPTX would get — rewritten for the host and compiled
// like a CPU kernel. Part of the code generator library.
//
// The rewrite (lowerGpuModuleForHost):
//   - special registers, barriers (bar.sync 0 and its popc/and/or forms),
//     bar.warp.sync, shfl.sync (all modes, with and without the predicate) and
//     vote.sync become calls of the host runtime (device/emu_block.h), each call
//     site numbered for reports; memory barriers vanish (threads interleave only
//     at those calls);
//   - shared-memory globals (address space 3) become offsets into the block's
//     shared memory, which every entry asks the runtime for;
//   - libdevice's __nv_<f> become the host C library's <f>;
//   - every load, store and atomic whose address is not the thread's own stack
//     goes through the runtime's access check first;
//   - the entries become host functions behind one dispatcher, `symbol(params,
//     which)`, that unpacks cuLaunchKernel's parameter array for entry *which.
// Any other NVVM intrinsic is refused with a kiln::Error naming it, so the
// emulator never runs code whose GPU meaning it does not implement.
#pragma once

#include <string>
#include <vector>

#include "jit/codegen_backend.h"

namespace llvm {
class Module;
}  // namespace llvm

namespace kiln::jit {

// `k` as its launch plan (no PTX) and a host object defining the dispatcher `symbol`.
EmulatedGpuObject compileGpuForHost(const loop::LoopKernel& k, const std::string& symbol, bool keepIR);

// Hand-written GPU LLVM IR (NVVM intrinsics, address-space-3 shared memory,
// kernels with the PTX_Kernel calling convention) as text, rewritten and
// compiled like generated code: for tests of the emulator's semantics and for
// debugging it with kernels Kiln does not generate. Throws kiln::Error for IR
// that does not parse or verify.
CpuObject compileGpuIrForHost(const std::string& irText, const std::vector<std::string>& entries, const std::string& symbol);

// The rewrite alone: `entries` (kernel functions of `m`, in launch order) behind
// the dispatcher `symbol`; `m` then targets the host.
void lowerGpuModuleForHost(llvm::Module& m, const std::vector<std::string>& entries, const std::string& symbol);

}  // namespace kiln::jit
