// CPU compilation: optimizes an LLVM module for the host and compiles it to a
// relocatable object file (position-independent, small code model), which the
// runtime loads itself (jit/object_loader.h) — the same bytes whether they were
// compiled just now, read from the disk cache or from an executable's
// precompiled section.
#pragma once

#include <memory>
#include <string>

#include "codegen/cpu_codegen.h"
#include "jit/codegen_backend.h"

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
}  // namespace llvm

namespace kiln::jit {

// Verifies, optimizes (-O3, host CPU) and compiles `module`, whose entry point is
// `symbol`. Throws kiln::Error if LLVM rejects it. Each thread keeps its own
// TargetMachine, so compiles on different threads share no LLVM state.
CpuObject compileToObject(llvm::Module& module, const std::string& symbol, bool keepIR);

// Gives `module` the host's triple and data layout (before code that asks for
// type sizes is generated).
void setHostTarget(llvm::Module& module);

// The -O3 pipeline with `tm`'s own passes (the GPU backend uses it too).
void optimizeModule(llvm::Module& module, llvm::TargetMachine& tm);

}  // namespace kiln::jit
