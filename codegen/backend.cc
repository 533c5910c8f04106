// The code generator library's entry point: CodegenBackend over LLVM.
#include "jit/codegen_backend.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/cpu_codegen.h"
#include "codegen/cpu_object.h"
#include "codegen/gpu_emulation.h"
#include "codegen/llvm_diagnostics.h"
#include "codegen/nvptx_codegen.h"

namespace kiln::jit {
namespace {

class LlvmBackend final : public CodegenBackend {
 public:
  CpuObject compileCpu(const loop::LoopKernel& k, const std::string& symbol, bool keepIR) override {
    llvm::LLVMContext ctx;
    quietDiagnostics(ctx);
    std::unique_ptr<llvm::Module> module = emitCpuModule(k, ctx, symbol, hostTarget());
    return compileToObject(*module, symbol, keepIR);
  }
  PtxModule compilePtx(const loop::LoopKernel& k, const std::string& symbol, int sm) override {
    return emitPtx(k, symbol, sm);
  }
  EmulatedGpuObject compileGpuEmulated(const loop::LoopKernel& k, const std::string& symbol, bool keepIR) override {
    return compileGpuForHost(k, symbol, keepIR);
  }
  std::string hostTargetDescription() override {
    const CpuTarget& t = hostTarget();
    return t.triple + "|" + t.cpu + "|" + t.features;
  }
};

}  // namespace
}  // namespace kiln::jit

extern "C" __attribute__((visibility("default"))) kiln::jit::CodegenBackend* kiln_codegen_backend(int abiVersion) {
  if (abiVersion != kiln::jit::kCodegenAbiVersion) return nullptr;
  static kiln::jit::LlvmBackend backend;
  return &backend;
}
