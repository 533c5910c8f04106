// The pooled allocator: size classes, reuse, limits, release-and-retry, threads.
#include <doctest/doctest.h>

#include <cstdlib>

#include <cstring>
#include <thread>
#include <vector>

#include "device/cuda_driver.h"
#include "kiln/error.h"
#include "kiln/memory.h"

using kiln::Device;
using kiln::PooledAllocator;

namespace {

// Host memory that refuses once `capacity` bytes are out, to test exhaustion
// without a byte limit.
class SmallDevice final : public kiln::DeviceMemory {
 public:
  explicit SmallDevice(uint64_t capacity, uint64_t* out) : capacity_(capacity), out_(out), host_(kiln::hostMemory(Device{})) {}
  Device device() const override { return Device{Device::Kind::CPU, 7}; }
  void* allocate(uint64_t bytes) override {
    if (*out_ + bytes > capacity_) return nullptr;
    *out_ += bytes;
    return host_->allocate(bytes);
  }
  void free(void* p, uint64_t bytes) override {
    *out_ -= bytes;
    host_->free(p, bytes);
  }

 private:
  uint64_t capacity_;
  uint64_t* out_;
  std::unique_ptr<kiln::DeviceMemory> host_;
};

}  // namespace

TEST_CASE("allocator: size classes cover every request with at most 1/16 rounding above 4 KiB") {
  CHECK(PooledAllocator::classBytes(PooledAllocator::classOf(0)) == 64);
  CHECK(PooledAllocator::classBytes(PooledAllocator::classOf(1)) == 64);
  CHECK(PooledAllocator::classBytes(PooledAllocator::classOf(65)) == 128);
  CHECK(PooledAllocator::classBytes(PooledAllocator::classOf(4096)) == 4096);
  CHECK(PooledAllocator::classBytes(PooledAllocator::classOf(4097)) == 4096 + 256);
  CHECK(PooledAllocator::classBytes(PooledAllocator::classOf(8192)) == 8192);
  CHECK(PooledAllocator::classBytes(PooledAllocator::classOf(8193)) == 8192 + 512);
  uint64_t prev = 0;
  for (uint32_t c = 0; c < PooledAllocator::numClasses(); ++c) {
    uint64_t n = PooledAllocator::classBytes(c);
    CHECK(n > prev);
    CHECK(n % 64 == 0);
    CHECK(PooledAllocator::classOf(n) == c);
    CHECK(PooledAllocator::classOf(prev + 1) == c);
    if (prev >= 4096) CHECK(static_cast<double>(n) / static_cast<double>(prev + 1) <= 1.0 + 1.0 / 16 + 1e-9);
    prev = n;
  }
  CHECK(prev >= (uint64_t(1) << 46));
}

TEST_CASE("allocator: a freed block is reused by a request of the same class, aligned to 64") {
  PooledAllocator pool(kiln::hostMemory(Device{}));
  auto a = pool.allocate(1000);
  CHECK(reinterpret_cast<uintptr_t>(a.ptr) % 64 == 0);
  std::memset(a.ptr, 1, 1000);
  pool.free(a);
  auto b = pool.allocate(1010);  // same 1024-byte class
  CHECK(b.ptr == a.ptr);
  auto c = pool.allocate(3000);
  CHECK(c.ptr != a.ptr);
  auto s = pool.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 2);
  CHECK(s.bytesInUse == 1024 + 3008);
  CHECK(s.peakBytesInUse == 1024 + 3008);
  pool.free(b);
  pool.free(c);
  s = pool.stats();
  CHECK(s.bytesInUse == 0);
  CHECK(s.bytesCached == 1024 + 3008);
  pool.releaseCached();
  CHECK(pool.stats().bytesCached == 0);
}

TEST_CASE("allocator: the byte limit is an error naming the device, the request and the limit") {
  PooledAllocator pool(kiln::hostMemory(Device{Device::Kind::CPU, 1}), 10'000);
  auto a = pool.allocate(6000);
  try {
    (void)pool.allocate(6000);
    FAIL("expected an out-of-memory error");
  } catch (const kiln::Error& e) {
    std::string m = e.message();
    CHECK(m.find("cpu:1") != std::string::npos);
    CHECK(m.find("6000 bytes") != std::string::npos);
    CHECK(m.find("limit is 10000 bytes") != std::string::npos);
  }
  CHECK_THROWS_AS((void)pool.allocate(uint64_t(1) << 50), kiln::Error);
  pool.free(a);
  // Cached blocks count against the limit; the allocator gives them back and retries.
  auto b = pool.allocate(9000);
  CHECK(pool.stats().releases == 1);
  CHECK(pool.stats().bytesCached == 0);
  pool.free(b);
}

TEST_CASE("allocator: a device that runs out gets its cache back before the request fails") {
  uint64_t out = 0;
  PooledAllocator pool(std::make_unique<SmallDevice>(16384, &out));
  auto a = pool.allocate(8000);
  auto b = pool.allocate(4000);
  pool.free(a);
  auto c = pool.allocate(12000);  // only fits once a's cached block is returned
  CHECK(pool.stats().releases == 1);
  CHECK(out == 4032 + 12288);
  CHECK_THROWS_WITH_AS((void)pool.allocate(8000), doctest::Contains("cpu:7"), kiln::Error);
  pool.free(b);
  pool.free(c);
}

TEST_CASE("allocator: shared blocks return to the pool when the last owner lets go, even after the pool") {
  std::shared_ptr<void> kept;
  {
    PooledAllocator pool(kiln::hostMemory(Device{}));
    auto x = pool.allocateShared(100);
    void* p = x.get();
    x.reset();
    auto y = pool.allocateShared(120);
    CHECK(y.get() == p);
    kept = pool.allocateShared(5000);
    CHECK(pool.stats().bytesInUse == 128 + 5120);
  }
  std::memset(kept.get(), 0, 5000);
  kept.reset();  // the pool's state outlives the pool; ASan/LSan check the rest
}

TEST_CASE("allocator: threads allocating and freeing at once keep the counts exact") {
  PooledAllocator pool(kiln::hostMemory(Device{}));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool, t] {
      std::vector<PooledAllocator::Block> held;
      for (int i = 0; i < 2000; ++i) {
        held.push_back(pool.allocate(static_cast<uint64_t>(64 * (1 + (i + t) % 50))));
        static_cast<char*>(held.back().ptr)[0] = static_cast<char>(i);
        if (held.size() > 8) {
          pool.free(held.front());
          held.erase(held.begin());
        }
      }
      for (auto& b : held) pool.free(b);
    });
  for (auto& th : threads) th.join();
  auto s = pool.stats();
  CHECK(s.bytesInUse == 0);
  CHECK(s.hits + s.misses == 8000);
  CHECK(s.hits > s.misses);
}

TEST_CASE("allocator: MemoryPools keeps one pool per device and says why a cuda pool cannot be had") {
  // Point the driver loader at a library that is not there (before anything
  // loads it), so this holds on GPU machines too.
  ::setenv("KILN_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 0);
  kiln::MemoryPools pools(1 << 20);
  auto& a = pools.forDevice(Device{});
  auto& b = pools.forDevice(Device{Device::Kind::CPU, 1});
  CHECK(&a != &b);
  CHECK(&pools.forDevice(Device{}) == &a);
  kiln::Tensor t = kiln::allocateTensor(b, kiln::DType::Float32, std::vector<int64_t>{3, 5});
  CHECK(t.device() == Device{Device::Kind::CPU, 1});
  auto stats = pools.stats();
  REQUIRE(stats.size() == 2);
  CHECK(stats[1].bytesInUse == 64);
  CHECK(stats[1].limit == (1u << 20));
  std::string why = kiln::device::cudaUnavailableReason();
  if (!why.empty()) {
    CHECK_THROWS_WITH_AS(pools.forDevice(Device{Device::Kind::CUDA, 0}), doctest::Contains(why.c_str()), kiln::Error);
    CHECK(why.find("CUDA was asked for, but") == 0);
  }
}

TEST_CASE("cuda driver: a missing driver library is reported in one line, naming it") {
  ::setenv("KILN_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 0);
  std::string why = kiln::device::cudaUnavailableReason();
  if (std::string(std::getenv("KILN_CUDA_DRIVER")) == "/nonexistent/libcuda.so.1") {
    CHECK(why.find("CUDA was asked for, but the CUDA driver (/nonexistent/libcuda.so.1) could not be loaded") == 0);
    CHECK(why.find('\n') == std::string::npos);
    CHECK_THROWS_WITH_AS(kiln::device::cudaComputeCapability(Device{Device::Kind::CUDA, 0}), doctest::Contains(why.c_str()), kiln::Error);
  }
}
