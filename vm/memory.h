// Tensor memory of one VM: storage blocks for kernel outputs, tensors placed in
// them, device copies, and the figures --stats prints.
//
// Every buffer comes from the VM's MemoryPools (one pooled allocator per device;
// see kiln/memory.h). A storage block is one pooled allocation; alloc_tensor
// places tensors in it, sharing ownership, so a block returns to its pool when
// its last tensor dies. Blocks keep their pool's state alive, so results that
// outlive the VM are still returned correctly.
#pragma once

#include <atomic>
#include <memory>
#include <span>

#include "kiln/memory.h"
#include "kiln/value.h"
#include "kiln/vm.h"

namespace kiln::vm {

class TensorMemory {
 public:
  explicit TensorMemory(std::shared_ptr<MemoryPools> pools);
  // A storage block of `bytes` on `device`; throws kiln::Error when the device
  // is unusable or out of memory.
  Value storage(uint64_t bytes, uint32_t alignment, Device device);
  // A tensor of its own (data-dependent operator outputs, copies).
  Tensor tensor(DType dtype, std::span<const int64_t> shape, Device device);
  Tensor copyTo(const Tensor& t, Device device);
  // device_copy of any value: a tensor is copied (a 0-d tensor arriving on the
  // host becomes a register scalar, as host code expects); tuples and ADT values
  // are rebuilt around copies of their tensors, iteratively, so a long list costs
  // no C++ stack; closures are shared (their captures stay where they are).
  Value copyValue(const Value& v, Device device);
  // The host pool is looked up once (MemoryPools::forDevice takes a lock; pools
  // are never removed, so the reference stays valid).
  PooledAllocator& pool(Device device) {
    if (device == Device{}) {
      if (!host_) host_ = &pools_->forDevice(device);
      return *host_;
    }
    return pools_->forDevice(device);
  }
  VMMemoryStats stats() const;

 private:
  std::shared_ptr<MemoryPools> pools_;
  PooledAllocator* host_ = nullptr;
  // Written by the VM's thread only (a plain add, no locked instruction), read
  // by stats() from any thread.
  void count(uint64_t bytes) {
    allocations_.store(allocations_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    bytes_.store(bytes_.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  std::atomic<uint64_t> allocations_{0}, bytes_{0};
};

// A tensor of `shape` and `dtype` at byte `offset` of the storage value `storage`.
Value placeTensor(const Value& storage, uint64_t offset, std::span<const int64_t> shape, DType dtype);

}  // namespace kiln::vm
