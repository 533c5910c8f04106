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

#include <boost/container/small_vector.hpp>

#include "kiln/memory.h"
#include "kiln/value.h"
#include "kiln/vm.h"

namespace kiln::vm {

class TensorMemory {
 public:
  explicit TensorMemory(std::shared_ptr<MemoryPools> pools);
  const std::shared_ptr<MemoryPools>& pools() const { return pools_; }
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

  // Recycled outputs. A small tensor the program releases while nothing else
  // shares it (its object held by that one register, its buffer by that one
  // tensor) is kept here instead of going back to its pool, and the next
  // alloc_tensor_own of a size it covers takes it back: a loop step's outputs then
  // cost no pool lock, no control block and no object allocation. Sharing is what
  // makes reuse safe: memory from outside Kiln (arguments, constants) is always
  // shared with its owner while the program runs, so only Kiln's own outputs are
  // recycled. Every allocation that reuses nothing first gives all recycled
  // tensors back to their pools, so the memory in use when anything new is
  // allocated, and so every peak, is what it would be without recycling. The VM
  // drops what is left when a run ends.
  static constexpr size_t kRecycleSlots = 8;
  static constexpr uint64_t kRecycleMaxBytes = 64 * 1024;
  // Takes `v` (leaving it empty) when it can be recycled; otherwise leaves it.
  bool recycle(Value& v) {
    // A view's count does not count it: the object is its owner's, however few
    // hold it. Tested first, without reading the object: a return clears its
    // frame in register order, so a view's object may already be gone.
    if (recycled_.size() >= kRecycleSlots || v.isView() || !v.isObject(ObjectKind::Tensor)) return false;
    const TensorObject* o = v.asTensorObject();
    const Tensor& t = o->tensor;
    if (o->refs.load(std::memory_order_relaxed) != 1 || !(t.device() == Device{}) || t.memoryUseCount() != 1) return false;
    uint64_t bytes = t.nbytes();
    if (bytes > kRecycleMaxBytes || bytes == 0) return false;
    recycled_.push_back({std::move(v), bytes});
    return true;
  }
  // A recycled host tensor made `dtype` of `shape` (`bytes` of them, the same
  // number its last use had, rounded to 64), or an empty value.
  Value reuse(DType dtype, std::span<const int64_t> shape, uint64_t bytes) {
    for (size_t i = recycled_.size(); i-- > 0;) {
      uint64_t had = recycled_[i].bytes;
      if ((had + 63) / 64 != (bytes + 63) / 64 || had < bytes) continue;
      const_cast<TensorObject*>(recycled_[i].value.asTensorObject())->tensor.reuseAs(dtype, shape);
      Value v = std::move(recycled_[i].value);
      recycled_[i] = std::move(recycled_.back());
      recycled_.pop_back();
      count(bytes);
      return v;
    }
    return Value();
  }
  void dropRecycled() { recycled_.clear(); }

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
  // A recycled tensor and its byte count, as recycle() found it.
  struct Recycled {
    Value value;
    uint64_t bytes;
  };
  boost::container::small_vector<Recycled, kRecycleSlots> recycled_;
};

// A tensor of `shape` and `dtype` at byte `offset` of the storage value `storage`.
Value placeTensor(const Value& storage, uint64_t offset, std::span<const int64_t> shape, DType dtype);

}  // namespace kiln::vm
