// CPU code generation: a LoopKernel to an LLVM module for the host.
//
// The module defines `void <symbol>(void* const* buffers, const int64_t* shapes)`.
// Buffers are the kernel's buffers in order (parameters, then outputs); `shapes`
// is the run-time shape array (see lower.h). The body lives in an internal
// function whose buffer pointers are `noalias`, so loops vectorize without alias
// checks; innermost loops carry vectorization hints, and the math functions are
// the vectorizable approximations of vector_math.h.
#pragma once

#include <memory>
#include <string>

#include "kernel_ir/loop_ir.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace kiln::jit {

struct CpuTarget {
  std::string triple;
  std::string cpu;       // e.g. "znver4"
  std::string features;  // e.g. "+avx512f,+avx512bw,..."
};

// The host, as LLVM sees it (detected once).
const CpuTarget& hostTarget();

std::unique_ptr<llvm::Module> emitCpuModule(const loop::LoopKernel& k, llvm::LLVMContext& ctx,
                                            const std::string& symbol, const CpuTarget& target);

}  // namespace kiln::jit
