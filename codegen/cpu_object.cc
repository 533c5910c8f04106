// The optimization pipeline and object emission for the host CPU.
#include "codegen/cpu_object.h"

#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <chrono>
#include <mutex>

#include "codegen/streaming_stores.h"
#include "kiln/error.h"

namespace kiln::jit {

namespace {

// No vectorized epilogue: LLVM's loop vectorizer otherwise follows a 16-lane
// AVX-512 loop with an 8-lane copy for the remainder, then a scalar one, so a
// kernel's math (a tanh, a sigmoid: dozens of instructions each) is optimized and
// compiled three times over. The remainder is under 16 elements per loop
// (one per parallel task), so the scalar loop alone costs nothing measurable
// (kernel_bench: element-wise chain, softmax and row sum unchanged), while the
// LSTM's element-wise kernels compile in ~60% of the time (sum of its 8 kernels
// 140-180 ms -> 117 ms, one by one). There is no loop metadata for this, only
// the option. LLVM is private to this library (linked statically, its symbols
// hidden), so setting it reaches no one else's LLVM; a build against the shared
// libLLVM (KILN_STATIC_LLVM=OFF) sets it for the process.
void setVectorizerOptions() {
  llvm::StringMap<llvm::cl::Option*>& options = llvm::cl::getRegisteredOptions();
  auto it = options.find("enable-epilogue-vectorization");
  if (it == options.end() || it->second->addOccurrence(0, it->first(), "false"))
    throw Error("internal: LLVM has no option enable-epilogue-vectorization to turn off");
}

// Position-independent code in the small model: everything the object refers to
// is reached PC-relative or through a GOT entry the loader makes, so it runs
// wherever the loader maps it.
std::unique_ptr<llvm::TargetMachine> hostMachine() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    setVectorizerOptions();
  });
  const CpuTarget& host = hostTarget();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(host.triple, err);
  if (!target) throw Error("cannot describe the host CPU to LLVM: " + err);
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(host.triple, host.cpu, host.features,
                                                                       llvm::TargetOptions(), llvm::Reloc::PIC_,
                                                                       llvm::CodeModel::Small,
                                                                       llvm::CodeGenOptLevel::Aggressive));
  if (!tm) throw Error("cannot create a target machine for the host CPU (" + host.cpu + ")");
  return tm;
}

double millisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void optimizeModule(llvm::Module& m, llvm::TargetMachine& tm) {
  // A fresh pass builder and analysis managers per compile: nothing shared between threads.
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

void setHostTarget(llvm::Module& module) {
  thread_local std::unique_ptr<llvm::TargetMachine> tm = hostMachine();
  module.setDataLayout(tm->createDataLayout());
  module.setTargetTriple(tm->getTargetTriple().str());
}

CpuObject compileToObject(llvm::Module& module, const std::string& symbol, bool keepIR) {
  CpuObject out;
  auto t0 = std::chrono::steady_clock::now();
  std::string verifyErrors;
  llvm::raw_string_ostream vos(verifyErrors);
  if (llvm::verifyModule(module, &vos)) throw Error("internal: invalid kernel IR for " + symbol + ": " + vos.str());
  // Building a TargetMachine costs milliseconds; each thread keeps its own.
  thread_local std::unique_ptr<llvm::TargetMachine> tm = hostMachine();
  module.setDataLayout(tm->createDataLayout());
  module.setTargetTriple(tm->getTargetTriple().str());
  optimizeModule(module, *tm);
  streamVectorStores(module);  // after the vectorizer, whose vector stores it rewrites
  if (keepIR) {
    llvm::raw_string_ostream os(out.optimizedIR);
    module.print(os, nullptr);
  }
  out.optimizeMillis = millisSince(t0);
  auto t1 = std::chrono::steady_clock::now();
  llvm::SmallString<0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw Error("LLVM cannot emit an object file for the host CPU");
  pm.run(module);
  out.object.assign(object.data(), object.size());
  out.codegenMillis = millisSince(t1);
  return out;
}

}  // namespace kiln::jit
