// ORC LLJIT set-up, the optimization pipeline, and compilation.
#include "jit/cpu_jit.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <unordered_map>

#include "jit/disk_cache.h"
#include "jit/conv2d.h"
#include "jit/gemm.h"
#include "device/thread_pool.h"
#include "kiln/error.h"

namespace kiln::jit {

namespace {

std::string errorText(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

// Receives every object the JIT compiles; writes those a compile asked to keep.
class KernelObjectCache : public llvm::ObjectCache {
 public:
  void expect(const std::string& module, DiskEntry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[module] = std::move(entry);
  }
  void notifyObjectCompiled(const llvm::Module* m, llvm::MemoryBufferRef obj) override {
    DiskEntry entry;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(m->getModuleIdentifier());
      if (it == pending_.end()) return;
      entry = std::move(it->second);
      pending_.erase(it);
    }
    entry.cache->store(entry.hash, entry.key, obj);
  }
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module*) override { return nullptr; }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, DiskEntry> pending_;
};

KernelObjectCache& objectCache() {
  static KernelObjectCache cache;
  return cache;
}

llvm::orc::LLJIT& theJit() {
  static std::unique_ptr<llvm::orc::LLJIT> jit = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) throw Error("cannot set up the CPU JIT: " + errorText(jtmb.takeError()));
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    auto j = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(*jtmb))
                 .setCompileFunctionCreator([](llvm::orc::JITTargetMachineBuilder b)
                                                -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                   auto tm = b.createTargetMachine();
                   if (!tm) return tm.takeError();
                   return std::make_unique<llvm::orc::TMOwningSimpleCompiler>(std::move(*tm), &objectCache());
                 })
                 .create();
    if (!j) throw Error("cannot set up the CPU JIT: " + errorText(j.takeError()));
    // Kernels may call libm (tanh, erf for float64, sin, cos, pow).
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*j)->getDataLayout().getGlobalPrefix());
    if (!gen) throw Error("cannot set up the CPU JIT: " + errorText(gen.takeError()));
    (*j)->getMainJITDylib().addGenerator(std::move(*gen));
    // The runtime entry points kernels call, defined explicitly so they resolve
    // whether or not the executable exports its symbols.
    llvm::orc::SymbolMap runtime;
    runtime[(*j)->mangleAndIntern("kiln_parallel_for")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&kiln_parallel_for), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("kiln_sgemm")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&kiln_sgemm), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("kiln_sconv2d")] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(&kiln_sconv2d), llvm::JITSymbolFlags::Exported);
    runtime[(*j)->mangleAndIntern("kiln_sgemm_packed")] = llvm::orc::ExecutorSymbolDef(
        llvm::orc::ExecutorAddr::fromPtr(&kiln_sgemm_packed), llvm::JITSymbolFlags::Exported);
    if (auto e = (*j)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(runtime))))
      throw Error("cannot set up the CPU JIT: " + errorText(std::move(e)));
    return std::move(*j);
  }();
  return *jit;
}

std::unique_ptr<llvm::TargetMachine> hostMachine() {
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) throw Error("cannot describe the host CPU: " + errorText(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto tm = jtmb->createTargetMachine();
  if (!tm) throw Error("cannot describe the host CPU: " + errorText(tm.takeError()));
  return std::move(*tm);
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

namespace {
// Machine code is process-wide (one LLJIT, one main JITDylib) while kernel caches
// belong to Runtimes, so two caches may ask for the same symbol (it names the
// kernel's content key): the first defines it, later ones get its entry (waiting
// for it while it compiles). Different symbols compile concurrently.
struct DefinedSymbols {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_future<KernelEntry>> entries;
};
DefinedSymbols& definedSymbols() {
  static DefinedSymbols d;
  return d;
}
// The entry of an already defined (or being defined) symbol; null otherwise.
KernelEntry definedEntry(const std::string& symbol) {
  DefinedSymbols& d = definedSymbols();
  std::shared_future<KernelEntry> f;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.entries.find(symbol);
    if (it == d.entries.end()) return nullptr;
    f = it->second;
  }
  return f.get();
}
KernelEntry defineOnce(const std::string& symbol, const std::function<KernelEntry()>& define) {
  DefinedSymbols& d = definedSymbols();
  std::promise<KernelEntry> promise;
  std::shared_future<KernelEntry> f;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.entries.find(symbol);
    if (it != d.entries.end()) {
      f = it->second;
    } else {
      f = promise.get_future().share();
      d.entries.emplace(symbol, f);
      mine = true;
    }
  }
  if (mine) {
    try {
      promise.set_value(define());
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(d.mu);
      d.entries.erase(symbol);
    }
  }
  return f.get();
}
}  // namespace

KernelEntry loadCompiledObject(std::unique_ptr<llvm::MemoryBuffer> object, const std::string& symbol) {
  return defineOnce(symbol, [&] {
    llvm::orc::LLJIT& jit = theJit();
    if (auto e = jit.addObjectFile(std::move(object)))
      throw Error("cannot load cached kernel " + symbol + ": " + errorText(std::move(e)));
    auto sym = jit.lookup(symbol);
    if (!sym) throw Error("cannot load cached kernel " + symbol + ": " + errorText(sym.takeError()));
    return sym->toPtr<KernelEntry>();
  });
}

CpuCompileResult compileForHost(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> ctx,
                                const std::string& symbol, bool keepIR, const DiskEntry& disk) {
  CpuCompileResult out;
  if (!keepIR) {
    if (KernelEntry e = definedEntry(symbol)) {
      out.entry = e;
      return out;
    }
  }
  llvm::orc::LLJIT& jit = theJit();
  auto t0 = std::chrono::steady_clock::now();
  std::string verifyErrors;
  llvm::raw_string_ostream vos(verifyErrors);
  if (llvm::verifyModule(*module, &vos)) throw Error("internal: invalid kernel IR for " + symbol + ": " + vos.str());
  // Building a TargetMachine costs milliseconds; each thread keeps its own.
  thread_local std::unique_ptr<llvm::TargetMachine> tm = hostMachine();
  module->setDataLayout(tm->createDataLayout());
  optimizeModule(*module, *tm);
  if (keepIR) {
    llvm::raw_string_ostream os(out.optimizedIR);
    module->print(os, nullptr);
  }
  out.optimizeMillis = millisSince(t0);
  auto t1 = std::chrono::steady_clock::now();
  out.entry = defineOnce(symbol, [&] {
    if (disk.cache) objectCache().expect(module->getModuleIdentifier(), disk);
    if (auto e = jit.addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx))))
      throw Error("cannot compile kernel " + symbol + ": " + errorText(std::move(e)));
    auto sym = jit.lookup(symbol);
    if (!sym) throw Error("cannot compile kernel " + symbol + ": " + errorText(sym.takeError()));
    return sym->toPtr<KernelEntry>();
  });
  out.codegenMillis = millisSince(t1);
  return out;
}

}  // namespace kiln::jit
