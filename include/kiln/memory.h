// Device memory pools: the public face of Kiln's pooled allocator.
//
// Every tensor buffer the VM creates comes from a PooledAllocator, one per device.
// A request is rounded up to a size class (64-byte steps up to 4 KiB, then 16
// classes per power of two, so at most 1/16 is lost to rounding) and served from
// that class's free list when it can be (a pool hit), else from the device (a
// miss). Freed blocks go back to their list, not to the device, so a dynamic
// model's steady state allocates nothing from the system; a request that the
// device (or the byte limit) cannot meet first returns every cached block to the
// device and retries, and only then fails with a kiln::Error that names the
// device, the request and the limit.
//
// Ownership: blocks handed out as shared_ptr keep the pool's state alive, so a
// tensor may outlive the VM and the MemoryPools that made it.
//
// Thread-safety: every member may be called from any thread; one MemoryPools
// may be shared by many VMs (VMOptions::pools).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

struct PoolStats {
  Device device;
  uint64_t bytesInUse = 0;      // handed out, in size-class bytes
  uint64_t bytesCached = 0;     // held in free lists
  uint64_t peakBytesInUse = 0;  // since creation or resetPeak()
  uint64_t peakBytesReserved = 0;  // in use + cached
  uint64_t hits = 0, misses = 0;   // requests served from a free list / from the device
  uint64_t releases = 0;           // times the cache was returned to the device to retry
  uint64_t limit = 0;              // 0: none
};

// Where a pool's memory comes from: the system allocator of one device.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // `bytes` (a multiple of 64) aligned to 64, or nullptr when the device is out of memory.
  virtual void* allocate(uint64_t bytes) = 0;
  virtual void free(void* p, uint64_t bytes) = 0;
  // Devices whose work runs asynchronously on streams (GPUs): the calling
  // thread's current stream, as a tag (0: none), and a wait until the work that
  // stream `tag` had queued is done. A block freed under one tag and handed out
  // under another is waited for first, so one stream's pending kernels never see
  // their memory reused by another's. Host memory has no streams.
  virtual uint64_t streamTag() const { return 0; }
  virtual void awaitStream(uint64_t) {}
  // Devices that check kernels' accesses (the emulated GPU): what the holder of
  // block `p` may read (its request rounded up to a whole 64-byte line, as
  // allocate() promises) and write (its request); both 0 as it goes back to
  // the cache, so a use after free is caught.
  virtual void setAddressable(void*, uint64_t /*readable*/, uint64_t /*writable*/) {}
};

// Host memory (64-byte aligned, from the C library), for `cpu` and `cpu:N`.
std::unique_ptr<DeviceMemory> hostMemory(Device device);
// The bytes of memory this process may use: the machine's physical memory, or
// its cgroup's limit where that is lower (0 when neither can be read). A host
// pool made without a limit of its own takes this one, so a tensor that cannot
// fit is an error at once instead of growing until the system kills the process.
uint64_t hostMemoryLimit();

// GPU memory from the CUDA driver (cuMemAlloc in the device's primary context),
// for `cuda:N`; throws kiln::Error saying why when CUDA is unusable here.
std::unique_ptr<DeviceMemory> cudaMemory(Device device);

class PooledAllocator {
 public:
  // `limit`: most bytes this pool may hold from the device (in use + cached); 0: no limit.
  explicit PooledAllocator(std::unique_ptr<DeviceMemory> memory, uint64_t limit = 0);
  ~PooledAllocator();
  PooledAllocator(const PooledAllocator&) = delete;
  PooledAllocator& operator=(const PooledAllocator&) = delete;

  struct Block {
    void* ptr = nullptr;
    uint32_t sizeClass = 0;
  };
  // At least max(bytes, 1) usable bytes, 64-byte aligned, readable to a whole
  // 64-byte line. Throws kiln::Error when neither the pool nor the device can serve it.
  Block allocate(uint64_t bytes);
  void free(Block block);
  // The same, owned: the block returns to the pool when the last owner lets go.
  std::shared_ptr<void> allocateShared(uint64_t bytes);

  // Returns every cached block to the device.
  void releaseCached();
  PoolStats stats() const;
  void resetPeak();
  void setLimit(uint64_t limit);
  Device device() const;

  // The size-class arithmetic, exposed for tests.
  static uint32_t classOf(uint64_t bytes);
  static uint64_t classBytes(uint32_t sizeClass);
  static uint32_t numClasses();

 private:
  struct State;
  Block take(uint64_t bytes, bool shared);
  std::shared_ptr<State> state_;
};

// One pooled allocator per device, created on first use. A `cuda` pool needs the
// CUDA driver; asking for one where there is none is a kiln::Error saying so.
// `limitPerDevice` 0: host pools take hostMemoryLimit(), GPU pools the device's own.
class MemoryPools {
 public:
  explicit MemoryPools(uint64_t limitPerDevice = 0) : limit_(limitPerDevice) {}
  PooledAllocator& forDevice(Device device);
  // Pools created so far, in order of creation.
  std::vector<PoolStats> stats() const;
  void resetPeaks();
  void releaseCached();

  // The pools of tensors made outside any VM (Tensor::empty): inputs, weights,
  // scratch. They live as long as the process.
  static MemoryPools& processDefault();

 private:
  mutable std::mutex mu_;
  uint64_t limit_;
  std::vector<std::pair<Device, std::unique_ptr<PooledAllocator>>> pools_;
};

// A tensor whose buffer comes from `pool`.
Tensor allocateTensor(PooledAllocator& pool, DType dtype, std::span<const int64_t> shape);

}  // namespace kiln
