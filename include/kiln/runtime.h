// Runtime: the process-level resources that running executables share — the
// kernel cache (in memory, and optionally on disk), the thread pool that kernels'
// parallel loops run on, the memory pools, and each executable's table of
// compiled kernels.
//
// Most apps never name one: a VM made without VMOptions::runtime uses
// Runtime::processDefault(), configured from the environment (KILN_CACHE_DIR for
// the disk cache, KILN_NUM_THREADS for the thread count, KILN_CUDA_DRIVER for the
// CUDA driver library). An app that wants two executables to keep separate caches
// or thread counts makes a Runtime for each with Runtime::create(options) and
// passes it in VMOptions.
//
// What is shared: VMs of one Runtime over one Executable share its kernel table,
// so each kernel compiles once for all of them; different Runtimes never share a
// table or a cache (their compiled machine code is process-wide, so a kernel two
// Runtimes both compile is generated once and loaded once). The CUDA driver is a
// process-wide library (dlopen'ed once), and so is shared by every Runtime.
//
// Threads and contention: every member is thread-safe. A Runtime's thread pool
// runs one parallel loop at a time: a loop that asks for it while another VM's
// loop holds it runs inline on its caller's thread (never blocking); stats()
// counts those (busyInline), so a server can see when its VMs compete for the pool
// and give them Runtimes of their own. A Runtime outlives every VM that uses it
// (VMs hold a shared_ptr).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/memory.h"

namespace kiln {

class Executable;
namespace jit {
class KernelCache;
}  // namespace jit
namespace device {
class ThreadPool;
}  // namespace device
namespace runtime {
class KernelTable;
}  // namespace runtime

struct RuntimeOptions {
  // Threads for kernels' parallel loops (1: none); 0: the process default pool
  // (one thread per core, or KILN_NUM_THREADS).
  int numThreads = 0;
  // Directory of the on-disk kernel cache; "": none.
  std::string kernelCacheDir;
  // Most bytes each device's pool in pools() may hold; 0: no limit.
  uint64_t memoryLimit = 0;
  // Make every kernel of an executable when the Runtime first sees it (its first
  // VM), in parallel on the pool, instead of one by one at each kernel's first call.
  bool compileOnLoad = true;
  // A tuning log (jit/tuning_log.h, written by kiln-tune) whose schedules the
  // kernels use; "": none. A malformed log is a kiln::Error naming its line;
  // records measured on another CPU are ignored (tuningNotes() says so).
  std::string tuningLog;

  // What the default Runtime uses: KILN_CACHE_DIR, KILN_COMPILE_ON_LOAD (0: off), KILN_TUNING_LOG;
  // threads from the default pool.
  static RuntimeOptions fromEnvironment();
};

struct RuntimeStats {
  uint64_t kernelCompiles = 0;   // kernels made by this Runtime's cache (compiled or loaded)
  uint64_t kernelCacheHits = 0;  // requests served from memory
  uint64_t diskCacheHits = 0;    // kernels loaded from the disk cache
  uint64_t precompiledHits = 0;  // kernels loaded from an executable's precompiled code
  uint64_t codegenCompiles = 0;  // kernels the code generator (LLVM) compiled
  double kernelMillis = 0;       // time spent making kernels (summed over threads)
  double compileOnLoadMillis = 0;  // wall time of compileOnLoad, over every executable
  bool codegenLoaded = false;    // whether this process has loaded the code generator (LLVM)
  double codegenLoadMillis = 0;  // and how long opening it took
  int threads = 1;               // the pool's size
  int64_t parallelLoops = 0;     // parallel loops shared out among the pool's threads
  int64_t busyInline = 0;        // loops big enough to share that ran inline: the pool was busy
};

class Runtime {
 public:
  static std::shared_ptr<Runtime> create(RuntimeOptions options = {});
  // The process's Runtime, made on first use from RuntimeOptions::fromEnvironment().
  // Its kernel cache is jit::KernelCache::global() and its pool the process
  // default, so code that configures those configures it.
  static std::shared_ptr<Runtime> processDefault();

  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RuntimeOptions& options() const;
  RuntimeStats stats() const;
  // What loading the tuning log set aside (records of another CPU), one line each.
  std::vector<std::string> tuningNotes() const;
  // Why CUDA cannot be used in this process ("" when it can).
  std::string cudaUnavailableReason() const;

  // A copy of `exe` that carries the machine code of each of its CPU kernels for
  // this CPU (compiled, or taken from this Runtime's caches), so that loading it
  // on a machine like this one compiles nothing and never loads LLVM; on another
  // CPU the kernels' IR is compiled as usual. What `kilnc --precompile` saves.
  std::shared_ptr<const Executable> precompile(const std::shared_ptr<const Executable>& exe);

  // Memory pools for VMs that share cached memory (pass as VMOptions::pools).
  const std::shared_ptr<MemoryPools>& pools() const;

  // Internal interfaces (runtime/, vm/): the cache, the pool (null for the
  // process default pool) and the kernel table of `exe`, made on first request
  // and kept while any VM holds it.
  jit::KernelCache& kernelCache() const;
  device::ThreadPool* threadPool() const;
  std::shared_ptr<runtime::KernelTable> kernelTable(const std::shared_ptr<const Executable>& exe);

 private:
  struct State;
  explicit Runtime(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln
