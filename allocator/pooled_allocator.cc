// The pooled allocator: size classes, free lists, limit, release-and-retry, statistics.
#include <algorithm>
#include <atomic>
#include <bit>
#include <string>
#include <thread>

#include "base/small_blocks.h"
#include "kiln/error.h"
#include "kiln/memory.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
// Cached blocks are poisoned, so a use after free is still caught under ASan
// although the memory never goes back to the system allocator.
#define KILN_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KILN_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KILN_POISON(p, n) ((void)(p), (void)(n))
#define KILN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kiln {

namespace {
constexpr uint64_t kSmallLimit = 4096;  // 64-byte steps up to here
constexpr uint32_t kSmallClasses = 64;
constexpr uint32_t kStepsPerDoubling = 16;
constexpr uint32_t kFirstLargeLog = 12;  // 2^12 = kSmallLimit
constexpr uint32_t kLastLargeLog = 45;   // classes reach 2^46 bytes
constexpr uint64_t kMaxRequest = uint64_t(1) << 46;

std::string bytesText(uint64_t n) {
  std::string s = std::to_string(n) + " bytes";
  if (n >= (uint64_t(1) << 20)) s += " (" + std::to_string(n >> 20) + " MiB)";
  return s;
}
}  // namespace

uint32_t PooledAllocator::numClasses() { return kSmallClasses + (kLastLargeLog - kFirstLargeLog + 1) * kStepsPerDoubling; }

uint32_t PooledAllocator::classOf(uint64_t bytes) {
  if (bytes <= kSmallLimit) return bytes == 0 ? 0 : static_cast<uint32_t>((bytes + 63) / 64 - 1);
  // 2^k < bytes <= 2^(k+1); the doubling is split into 16 equal steps.
  uint32_t k = 63u - static_cast<uint32_t>(std::countl_zero(bytes - 1));
  uint64_t step = uint64_t(1) << (k - 4);
  uint64_t j = (bytes - (uint64_t(1) << k) + step - 1) / step;  // 1..16
  return kSmallClasses + (k - kFirstLargeLog) * kStepsPerDoubling + static_cast<uint32_t>(j - 1);
}

uint64_t PooledAllocator::classBytes(uint32_t c) {
  if (c < kSmallClasses) return (uint64_t(c) + 1) * 64;
  uint32_t k = kFirstLargeLog + (c - kSmallClasses) / kStepsPerDoubling;
  uint64_t j = (c - kSmallClasses) % kStepsPerDoubling + 1;
  return (uint64_t(1) << k) + j * (uint64_t(1) << (k - 4));
}

// Critical sections are a few loads and stores (a free-list push or pop), so a
// spin lock is cheaper than a mutex; contention yields the core.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct PooledAllocator::State {
  std::unique_ptr<DeviceMemory> memory;
  bool host = true;  // host memory: poisoned while cached (device pointers are not host addresses)
  // Held across the device's own allocate() on a miss: misses are rare once warm.
  mutable SpinLock mu;
  // Per size class. `tag` is the stream (of a GPU pool) the block was freed
  // under; host blocks always have 0.
  struct Cached {
    void* ptr;
    uint64_t tag;
  };
  std::vector<std::vector<Cached>> free;
  // Blocks out through allocateShared, whose deleters hold a plain pointer to
  // this State (a shared_ptr each would be a locked add and subtract on one
  // count per tensor, shared by every thread of the pool). The allocator, dying
  // with some out, leaves the State to them: `orphan` keeps it until the last
  // comes back.
  uint64_t sharedOut = 0;
  std::shared_ptr<State> orphan;
  uint64_t limit = 0;
  uint64_t inUse = 0, cached = 0, peakInUse = 0, peakReserved = 0;
  uint64_t hits = 0, misses = 0, releases = 0;

  ~State() {
    // Blocks freed after their PooledAllocator died came back here.
    releaseCachedLocked();
  }

  void noteUse(uint64_t bytes) {
    inUse += bytes;
    peakInUse = std::max(peakInUse, inUse);
    peakReserved = std::max(peakReserved, inUse + cached);
  }

  // Caller holds mu.
  void releaseCachedLocked() {
    for (uint32_t c = 0; c < free.size(); ++c) {
      uint64_t n = classBytes(c);
      for (const Cached& b : free[c]) {
        if (host) KILN_UNPOISON(b.ptr, n);
        if (b.tag) memory->awaitStream(b.tag);
        memory->free(b.ptr, n);
      }
      cached -= n * free[c].size();
      free[c].clear();
      free[c].shrink_to_fit();
    }
    ++releases;
  }

  void give(void* p, uint32_t c, bool shared = false) {
    uint64_t n = classBytes(c);
    if (host) KILN_POISON(p, n);
    else memory->setAddressable(p, 0, 0);
    uint64_t tag = host ? 0 : memory->streamTag();
    std::shared_ptr<State> last;  // released after the lock, when this was the orphan's last block
    std::lock_guard<SpinLock> lock(mu);
    free[c].push_back({p, tag});
    inUse -= n;
    cached += n;
    if (shared && --sharedOut == 0) last = std::move(orphan);
  }
};

PooledAllocator::PooledAllocator(std::unique_ptr<DeviceMemory> memory, uint64_t limit) : state_(std::make_shared<State>()) {
  state_->memory = std::move(memory);
  state_->host = !state_->memory->device().isGpu();
  state_->free.resize(numClasses());
  state_->limit = limit;
}

PooledAllocator::~PooledAllocator() {
  std::lock_guard<SpinLock> lock(state_->mu);
  state_->releaseCachedLocked();
  if (state_->sharedOut) state_->orphan = state_;
}

Device PooledAllocator::device() const { return state_->memory->device(); }

PooledAllocator::Block PooledAllocator::allocate(uint64_t bytes) { return take(bytes, false); }

PooledAllocator::Block PooledAllocator::take(uint64_t bytes, bool shared) {
  State& s = *state_;
  if (bytes > kMaxRequest)
    throw Error("out of memory on " + device().toString() + ": a request of " + bytesText(bytes) + " is larger than any device");
  uint32_t c = classOf(bytes);
  uint64_t n = classBytes(c);
  // Only what the caller asked for (rounded to the line) becomes addressable.
  uint64_t usable = std::max<uint64_t>((bytes + 63) / 64 * 64, 64);
  void* p = nullptr;
  uint64_t freedUnder = 0;
  {
    std::lock_guard<SpinLock> lock(s.mu);
    if (!s.free[c].empty()) {
      p = s.free[c].back().ptr;
      freedUnder = s.free[c].back().tag;
      s.free[c].pop_back();
      s.cached -= n;
      ++s.hits;
      s.noteUse(n);
    } else {
      ++s.misses;
      // Over the limit, or refused by the device: give the cache back once and retry.
      for (int attempt = 0; attempt < 2 && !p; ++attempt) {
        bool fits = s.limit == 0 || s.inUse + s.cached + n <= s.limit;
        if (fits) p = s.memory->allocate(n);
        if (!p && attempt == 0 && s.cached > 0) s.releaseCachedLocked();
        else if (!p) break;
      }
      if (!p) {
        std::string why = s.limit && s.inUse + n > s.limit
                              ? "the limit is " + bytesText(s.limit) + " and " + bytesText(s.inUse) + " are in use"
                              : "the device has no more memory (" + bytesText(s.inUse) + " in use by Kiln)";
        throw Error("out of memory on " + device().toString() + ": cannot allocate " + bytesText(bytes) + "; " + why);
      }
      s.noteUse(n);
    }
    s.sharedOut += shared;
  }
  if (s.host) KILN_UNPOISON(p, usable);
  else s.memory->setAddressable(p, usable, bytes);
  if (freedUnder && freedUnder != s.memory->streamTag()) s.memory->awaitStream(freedUnder);
  return Block{p, c};
}

void PooledAllocator::free(Block block) {
  if (block.ptr) state_->give(block.ptr, block.sizeClass);
}

std::shared_ptr<void> PooledAllocator::allocateShared(uint64_t bytes) {
  Block b = take(bytes, true);
  try {
    // The reference count from the thread's small blocks: one per tensor made.
    return std::shared_ptr<void>(b.ptr, [state = state_.get(), c = b.sizeClass](void* p) { state->give(p, c, true); },
                                 small_blocks::Allocator<char>());
  } catch (...) {
    state_->give(b.ptr, b.sizeClass, true);
    throw;
  }
}

void PooledAllocator::releaseCached() {
  std::lock_guard<SpinLock> lock(state_->mu);
  state_->releaseCachedLocked();
}

PoolStats PooledAllocator::stats() const {
  const State& s = *state_;
  std::lock_guard<SpinLock> lock(s.mu);
  PoolStats out;
  out.device = s.memory->device();
  out.bytesInUse = s.inUse;
  out.bytesCached = s.cached;
  out.peakBytesInUse = s.peakInUse;
  out.peakBytesReserved = s.peakReserved;
  out.hits = s.hits;
  out.misses = s.misses;
  out.releases = s.releases;
  out.limit = s.limit;
  return out;
}

void PooledAllocator::resetPeak() {
  std::lock_guard<SpinLock> lock(state_->mu);
  state_->peakInUse = state_->inUse;
  state_->peakReserved = state_->inUse + state_->cached;
}

void PooledAllocator::setLimit(uint64_t limit) {
  std::lock_guard<SpinLock> lock(state_->mu);
  state_->limit = limit;
}

PooledAllocator& MemoryPools::forDevice(Device device) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [d, pool] : pools_)
    if (d == device) return *pool;
  bool host = device.kind == Device::Kind::CPU;
  uint64_t limit = limit_ ? limit_ : host ? hostMemoryLimit() : 0;
  pools_.emplace_back(device, std::make_unique<PooledAllocator>(host ? hostMemory(device) : cudaMemory(device), limit));
  return *pools_.back().second;
}

MemoryPools& MemoryPools::processDefault() {
  // Never destroyed: tensors in static objects may be released after main returns.
  static MemoryPools* pools = new MemoryPools();
  return *pools;
}

std::vector<PoolStats> MemoryPools::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PoolStats> out;
  for (const auto& [d, pool] : pools_) out.push_back(pool->stats());
  return out;
}

void MemoryPools::resetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [d, pool] : pools_) pool->resetPeak();
}

void MemoryPools::releaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [d, pool] : pools_) pool->releaseCached();
}

// Declared with Tensor (kiln/tensor.h) but defined here: a tensor's own memory
// comes from the process's default pools, which base/ cannot see.
Tensor Tensor::empty(DType dtype, std::span<const int64_t> shape, Device device) {
  return allocateTensor(MemoryPools::processDefault().forDevice(device), dtype, shape);
}

Tensor allocateTensor(PooledAllocator& pool, DType dtype, std::span<const int64_t> shape) {
  for (int64_t d : shape)
    if (d < 0) throw Error("negative dimension in shape " + shapeString(shape));
  uint64_t bytes = dtypeSize(dtype);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      throw Error("out of memory on " + pool.device().toString() + ": a tensor of shape " + shapeString(shape) + " is larger than any device");
  return Tensor::view(dtype, shape, pool.allocateShared(bytes), pool.device());
}

}  // namespace kiln
