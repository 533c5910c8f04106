// Serving throughput and latency: T threads, each with its own VM over one shared
// executable and one Runtime, send the serving workload's mixed requests (static
// shapes, dynamic shapes, recursion; bench/serve_workload.h) back to back.
// Prints requests per second and p50/p99 latency for T = 1, 2, 4, 8, overall and
// per kind of request.
//
//   serve_bench [--seconds S] [--pool-threads P] [--shared-pools]
//
// Each VM's kernels run on their request's thread (a pool of 1) by default, the
// pattern of samples/embed: concurrent requests are the parallelism.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/serve_workload.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int poolThreads = 1;
  bool sharedPools = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--shared-pools")) sharedPools = true;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--pool-threads")) poolThreads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: serve_bench [--seconds S] [--pool-threads P] [--shared-pools]\n");
      return 2;
    }
  }
  try {
    kiln::bench::ServeWorkload w = kiln::bench::makeServeWorkload();
    kiln::RuntimeOptions ro;
    ro.numThreads = poolThreads;
    auto runtime = kiln::Runtime::create(ro);
    kiln::VMOptions vo;
    vo.runtime = runtime;
    // Default: each VM its own pools (VMOptions' default). --shared-pools: one set
    // for all VMs (less memory held; the pools' lock is then contended).
    if (sharedPools) vo.pools = runtime->pools();
    unsigned cores = std::thread::hardware_concurrency();
    std::printf("serve_bench: %zu request variants (static dense 1x64, dynamic ?x16 rows, batched dense ?x64, recursive lists), "
                "%.1f s per row, %u cores, pool of %d, %s\n",
                w.requests.size(), seconds, cores, poolThreads, sharedPools ? "one set of memory pools" : "memory pools per VM");
    std::printf("%8s %12s %10s %10s   %s\n", "threads", "requests/s", "p50 (us)", "p99 (us)",
                "p50/p99 by kind (us): static, dynamic, batched, recursive");
    for (int threads : {1, 2, 4, 8}) {
      std::vector<std::vector<std::pair<size_t, double>>> latencies(static_cast<size_t>(threads));
      std::vector<std::thread> workers;
      auto start = Clock::now();
      auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
      for (int t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
          kiln::VirtualMachine vm(w.exe, vo);
          for (const auto& r : w.requests) vm.invoke(r.function, r.args);  // warm: kernels made, pools filled
          auto& mine = latencies[static_cast<size_t>(t)];
          for (size_t i = 0; Clock::now() < deadline; ++i) {
            size_t k = kiln::bench::serveVariant(i, static_cast<size_t>(t), w.requests.size());
            auto t0 = Clock::now();
            vm.invoke(w.requests[k].function, w.requests[k].args);
            mine.emplace_back(k, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
          }
        });
      for (auto& th : workers) th.join();
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      std::vector<double> all;
      std::map<std::string, std::vector<double>> byKind;
      for (const auto& l : latencies)
        for (auto [k, us] : l) {
          all.push_back(us);
          byKind[w.requests[k].kind].push_back(us);
        }
      double rps = static_cast<double>(all.size()) / elapsed;
      double p50 = percentile(all, 0.50), p99 = percentile(all, 0.99);
      std::printf("%8d %12.0f %10.1f %10.1f  ", threads, rps, p50, p99);
      for (const char* kind : {"static", "dynamic", "batched", "recursive"}) {
        auto& v = byKind[kind];
        double a = percentile(v, 0.5), b = percentile(v, 0.99);
        std::printf(" %.1f/%.1f", a, b);
      }
      std::printf("\n");
    }
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "serve_bench: %s\n", e.what());
    return 1;
  }
}
