// Serving under load: T threads, each with its own VM over one shared executable
// (one Runtime, one set of memory pools), send N requests each, mixing static
// and dynamic shapes and recursion; every result is checked against the result
// of the same request run alone on one thread beforehand. Then memory: after each
// round (its VMs gone) the pools' bytes in use are back at the baseline, and the
// memory they hold stays within T single-VM peaks however many rounds run.
//
//   serve_stress [--threads T] [--requests N] [--rounds R] [--pool-threads P]
//
// The test suite runs it at a small count; scripts/tsan.sh runs it at the full
// count (8 threads x 10,000 requests) under ThreadSanitizer.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/serve_workload.h"
#include "kiln/error.h"
#include "kiln/memory.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

namespace {

struct Options {
  int threads = 8;
  long requests = 10000;
  int rounds = 3;
  int poolThreads = 2;  // the Runtime's pool, which the VMs' parallel loops compete for
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    long v = std::strtol(argv[i + 1], nullptr, 10);
    if (v <= 0 || v > 10'000'000) throw kiln::Error(std::string("bad value for ") + argv[i]);
    if (!std::strcmp(argv[i], "--threads")) o.threads = static_cast<int>(v);
    else if (!std::strcmp(argv[i], "--requests")) o.requests = v;
    else if (!std::strcmp(argv[i], "--rounds")) o.rounds = static_cast<int>(v);
    else if (!std::strcmp(argv[i], "--pool-threads")) o.poolThreads = static_cast<int>(v);
    else throw kiln::Error(std::string("unknown option ") + argv[i]);
  }
  return o;
}

struct HostMemory {
  uint64_t inUse = 0, reserved = 0;
};
HostMemory hostMemory(const kiln::MemoryPools& pools) {
  HostMemory m;
  for (const kiln::PoolStats& s : pools.stats()) {
    m.inUse += s.bytesInUse;
    m.reserved += s.bytesInUse + s.bytesCached;
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    kiln::bench::ServeWorkload w = kiln::bench::makeServeWorkload();
    kiln::RuntimeOptions ro;
    ro.numThreads = o.poolThreads;
    std::shared_ptr<kiln::Runtime> runtime = kiln::Runtime::create(ro);
    kiln::VMOptions vo;
    vo.runtime = runtime;
    vo.pools = std::make_shared<kiln::MemoryPools>();

    // The reference: every request alone, on this thread.
    std::vector<kiln::Value> expected;
    {
      kiln::VirtualMachine vm(w.exe, vo);
      for (const auto& r : w.requests) expected.push_back(vm.invoke(r.function, r.args));
    }
    HostMemory baseline = hostMemory(*vo.pools);
    std::printf("serve_stress: %d threads x %ld requests x %d rounds, %zu request variants, pool of %d\n", o.threads,
                o.requests, o.rounds, w.requests.size(), o.poolThreads);
    std::printf("baseline: %llu bytes in use (the reference results), %llu reserved\n",
                static_cast<unsigned long long>(baseline.inUse), static_cast<unsigned long long>(baseline.reserved));

    bool ok = true;
    for (int round = 1; round <= o.rounds; ++round) {
      std::atomic<long> checked{0}, mismatches{0};
      std::mutex reportMu;
      std::string firstReport;
      std::vector<std::exception_ptr> failures(static_cast<size_t>(o.threads));
      std::vector<std::thread> workers;
      for (int t = 0; t < o.threads; ++t)
        workers.emplace_back([&, t] {
          try {
            kiln::VirtualMachine vm(w.exe, vo);
            for (long i = 0; i < o.requests; ++i) {
              size_t k = kiln::bench::serveVariant(static_cast<size_t>(i), static_cast<size_t>(t), w.requests.size());
              kiln::Value got = vm.invoke(w.requests[k].function, w.requests[k].args);
              std::string why;
              if (!kiln::bench::sameValue(got, expected[k], 1e-5, &why)) {
                ++mismatches;
                std::lock_guard<std::mutex> lock(reportMu);
                if (firstReport.empty())
                  firstReport = "thread " + std::to_string(t) + " request " + std::to_string(i) + " (" +
                                w.requests[k].kind + " @" + w.requests[k].function + "): " + why;
              }
              ++checked;
            }
          } catch (...) {
            failures[static_cast<size_t>(t)] = std::current_exception();
          }
        });
      for (auto& th : workers) th.join();
      for (auto& f : failures)
        if (f) std::rethrow_exception(f);
      HostMemory after = hostMemory(*vo.pools);
      std::printf("round %d: %ld results checked, %ld mismatches; host pool: %llu bytes in use, %llu reserved\n", round,
                  checked.load(), mismatches.load(), static_cast<unsigned long long>(after.inUse),
                  static_cast<unsigned long long>(after.reserved));
      if (mismatches) {
        std::printf("FAIL: %s\n", firstReport.c_str());
        ok = false;
      }
      if (after.inUse != baseline.inUse) {
        std::printf("FAIL: %llu bytes still in use after the round's VMs are gone (baseline %llu)\n",
                    static_cast<unsigned long long>(after.inUse), static_cast<unsigned long long>(baseline.inUse));
        ok = false;
      }
      // The pools keep what the busiest moment so far needed, so their reserve
      // creeps up while rarer coincidences of T threads at their peaks happen, and
      // then stays; it is bounded by T single-VM peaks (what one VM held after
      // running every request alone) over the baseline, whatever the rounds.
      uint64_t bound = baseline.reserved * static_cast<uint64_t>(o.threads + 1);
      if (after.reserved > bound) {
        std::printf("FAIL: the pools reserve %llu bytes, more than %d threads' peaks (%llu)\n",
                    static_cast<unsigned long long>(after.reserved), o.threads, static_cast<unsigned long long>(bound));
        ok = false;
      }
    }
    kiln::RuntimeStats s = runtime->stats();
    std::printf("runtime: %llu kernels made, %lld parallel loops, %lld ran inline (pool busy)\n",
                static_cast<unsigned long long>(s.kernelCompiles), static_cast<long long>(s.parallelLoops),
                static_cast<long long>(s.busyInline));
    std::printf(ok ? "ok\n" : "FAILED\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_stress: %s\n", e.what());
    return 1;
  }
}
