// Allocation benchmark: a pool hit (allocate + free of a cached block) in ns, next
// to mimalloc's own malloc/free of the same size measured in the same run, and
// the owned form the VM uses for storage (allocateShared + release).
#include <mimalloc.h>

#include <cstdio>
#include <vector>

#include "kiln/memory.h"
#include "machine_limits.h"

namespace {

constexpr int kOps = 1'000'000;

template <class F>
double nsPerOp(F&& f) {
  return kiln::bench::bestSeconds(7, [&] {
           for (int i = 0; i < kOps; ++i) f(i);
         }) * 1e9 / kOps;
}

}  // namespace

int main() {
  kiln::PooledAllocator pool(kiln::hostMemory(kiln::Device{}));
  std::printf("%-10s %14s %16s %10s %20s\n", "bytes", "pool hit (ns)", "mimalloc (ns)", "ratio", "allocateShared (ns)");
  for (uint64_t bytes : {64ull, 4096ull, 65536ull, 1ull << 20}) {
    pool.free(pool.allocate(bytes));  // warm the class: later requests are hits
    void* volatile sink = nullptr;
    double hit = nsPerOp([&](int) {
      auto b = pool.allocate(bytes);
      sink = b.ptr;
      pool.free(b);
    });
    double mi = nsPerOp([&](int) {
      void* p = mi_malloc_aligned(bytes, 64);
      sink = p;
      mi_free(p);
    });
    double shared = nsPerOp([&](int) {
      auto p = pool.allocateShared(bytes);
      sink = p.get();
    });
    (void)sink;
    std::printf("%-10llu %14.1f %16.1f %10.2f %20.1f\n", static_cast<unsigned long long>(bytes), hit, mi, hit / mi, shared);
  }
  auto s = pool.stats();
  std::printf("pool: %llu hits, %llu misses (ratio = pool hit / mimalloc malloc+free; under 1 is faster)\n",
              static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses));
  return 0;
}
