// Runtime: the kernel cache, thread pool, pools and kernel tables apps share.
#include "kiln/runtime.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <mutex>
#include <unordered_map>

#include "device/cuda_driver.h"
#include "device/thread_pool.h"
#include "jit/codegen_backend.h"
#include "jit/kernel.h"
#include "runtime/kernel_table.h"

namespace kiln {

struct Runtime::State {
  RuntimeOptions options;
  // A cache of its own, or the process cache (held without ownership).
  std::shared_ptr<jit::KernelCache> cache;
  std::shared_ptr<device::ThreadPool> pool;  // null: the process default pool
  std::shared_ptr<MemoryPools> pools;
  std::mutex mu;
  // One table per live executable. The table holds its executable, so the
  // address cannot be reused while the entry is live; expired entries are
  // dropped as new ones are made.
  std::unordered_map<const Executable*, std::weak_ptr<runtime::KernelTable>> tables;
  std::atomic<double> compileOnLoadMillis{0};
};

RuntimeOptions RuntimeOptions::fromEnvironment() {
  RuntimeOptions o;
  if (const char* dir = std::getenv("KILN_CACHE_DIR")) o.kernelCacheDir = dir;
  if (const char* c = std::getenv("KILN_COMPILE_ON_LOAD")) o.compileOnLoad = std::string(c) != "0";
  if (const char* t = std::getenv("KILN_TUNING_LOG")) o.tuningLog = t;
  return o;
}

Runtime::Runtime(std::unique_ptr<State> state) : state_(std::move(state)) {}
Runtime::~Runtime() = default;

std::shared_ptr<Runtime> Runtime::create(RuntimeOptions options) {
  auto s = std::make_unique<State>();
  s->cache = std::make_shared<jit::KernelCache>(options.kernelCacheDir);
  if (!options.tuningLog.empty())
    s->cache->setTuningLog(std::make_shared<const jit::TuningLog>(jit::TuningLog::load(options.tuningLog)));
  if (options.numThreads > 0) s->pool = std::make_shared<device::ThreadPool>(options.numThreads);
  s->pools = std::make_shared<MemoryPools>(options.memoryLimit);
  s->options = std::move(options);
  return std::shared_ptr<Runtime>(new Runtime(std::move(s)));
}

std::shared_ptr<Runtime> Runtime::processDefault() {
  static const std::shared_ptr<Runtime> runtime = [] {
    auto s = std::make_unique<State>();
    s->options = RuntimeOptions::fromEnvironment();
    s->cache = std::shared_ptr<jit::KernelCache>(&jit::KernelCache::global(), [](jit::KernelCache*) {});
    // A malformed $KILN_TUNING_LOG is reported at the first use of the default Runtime.
    if (!s->options.tuningLog.empty())
      s->cache->setTuningLog(std::make_shared<const jit::TuningLog>(jit::TuningLog::load(s->options.tuningLog)));
    s->pools = std::make_shared<MemoryPools>(s->options.memoryLimit);
    return std::shared_ptr<Runtime>(new Runtime(std::move(s)));
  }();
  return runtime;
}

const RuntimeOptions& Runtime::options() const { return state_->options; }

std::vector<std::string> Runtime::tuningNotes() const {
  auto log = state_->cache->tuningLog();
  return log ? log->notes() : std::vector<std::string>{};
}

RuntimeStats Runtime::stats() const {
  RuntimeStats r;
  r.kernelCompiles = state_->cache->compiles();
  r.kernelCacheHits = state_->cache->hits();
  r.diskCacheHits = state_->cache->diskHits();
  r.precompiledHits = state_->cache->precompiledHits();
  r.codegenCompiles = state_->cache->codegens();
  r.kernelMillis = state_->cache->kernelMillis();
  r.compileOnLoadMillis = state_->compileOnLoadMillis.load();
  r.codegenLoaded = jit::codegenBackendLoaded();
  r.codegenLoadMillis = jit::codegenBackendLoadMillis();
  device::ThreadPoolStats p =
      state_->pool ? state_->pool->stats() : device::ThreadPool::processDefault()->stats();
  r.threads = p.threads;
  r.parallelLoops = p.shared;
  r.busyInline = p.busyInline;
  return r;
}

std::string Runtime::cudaUnavailableReason() const { return device::cudaUnavailableReason(); }

const std::shared_ptr<MemoryPools>& Runtime::pools() const { return state_->pools; }

jit::KernelCache& Runtime::kernelCache() const { return *state_->cache; }

device::ThreadPool* Runtime::threadPool() const { return state_->pool.get(); }

std::shared_ptr<const Executable> Runtime::precompile(const std::shared_ptr<const Executable>& exe) {
  Executable::Contents c = exe->contents();
  Device device = exe->devices().front();
  if (device.kind != Device::Kind::CPU) return exe;
  auto table = kernelTable(exe);
  table->compileAll(state_->pool.get());
  c.precompiled.clear();
  for (uint32_t k = 0; k < exe->kernels().size(); ++k) {
    if (exe->kernels()[k].kind != KernelKind::Compiled) continue;
    std::string code = table->compiled(k, device).sealedMachineCode();  // throws what the kernel's compile throws
    if (!code.empty()) c.precompiled.push_back(PrecompiledKernel{k, device, std::move(code)});
  }
  return Executable::build(std::move(c));
}

std::shared_ptr<runtime::KernelTable> Runtime::kernelTable(const std::shared_ptr<const Executable>& exe) {
  std::shared_ptr<runtime::KernelTable> table;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto& tables = state_->tables;
    if (auto it = tables.find(exe.get()); it != tables.end())
      if (auto t = it->second.lock()) return t;
    for (auto it = tables.begin(); it != tables.end();) it = it->second.expired() ? tables.erase(it) : std::next(it);
    table = std::make_shared<runtime::KernelTable>(exe, state_->cache, state_->pools);
    tables[exe.get()] = table;
  }
  // Outside the lock: another VM over the same executable meanwhile finds the
  // table and waits, kernel by kernel, in the cache for what is being compiled.
  if (state_->options.compileOnLoad) {
    double ms = table->compileAll(state_->pool.get());
    double sum = state_->compileOnLoadMillis.load();
    while (!state_->compileOnLoadMillis.compare_exchange_weak(sum, sum + ms)) {
    }
  }
  return table;
}

}  // namespace kiln
