// The CPU JIT: optimizes LLVM modules for the host and compiles them with ORC
// LLJIT into callable code.
//
// One LLJIT serves the whole process; each kernel arrives as its own
// ThreadSafeModule (own LLVMContext), so compiles on different threads never
// share LLVM state. Compiled code lives as long as the process. A symbol is
// defined once: kernel caches of different Runtimes that ask for the same symbol
// get the first one's entry point (a concurrent request waits for it).
#pragma once

#include <memory>
#include <string>

#include "jit/cpu_codegen.h"

namespace llvm {
class MemoryBuffer;
class TargetMachine;
}  // namespace llvm

namespace kiln::jit {

using KernelEntry = void (*)(void* const* buffers, const int64_t* shapes);

struct CpuCompileResult {
  KernelEntry entry = nullptr;
  std::string optimizedIR;  // filled when asked for
  double optimizeMillis = 0;
  double codegenMillis = 0;
};

// Optimizes (-O3, host CPU) and compiles `module`, whose entry point is `symbol`.
// Throws kiln::Error if LLVM rejects it.
// With `disk`, the compiled object is also written to the disk cache under
// (`diskHash`, `diskKey`).
class DiskCache;
struct DiskEntry {
  const DiskCache* cache = nullptr;
  uint64_t hash = 0;
  std::string key;
};
CpuCompileResult compileForHost(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> ctx,
                                const std::string& symbol, bool keepIR, const DiskEntry& disk = {});

// The -O3 pipeline with `tm`'s own passes (the GPU backend uses it too).
void optimizeModule(llvm::Module& module, llvm::TargetMachine& tm);

// Loads a cached object (see disk_cache.h) and returns its entry point `symbol`.
KernelEntry loadCompiledObject(std::unique_ptr<llvm::MemoryBuffer> object, const std::string& symbol);

}  // namespace kiln::jit
