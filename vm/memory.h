// Tensor memory of one VM: storage blocks for kernel outputs, tensors placed in
// them, device copies, and the figures --stats prints.
//
// A storage block is one aligned allocation (padded so kernels may read a whole
// 64-byte line past the end); alloc_tensor places tensors in it, sharing
// ownership, so a block lives until its last tensor dies. Statistics are shared
// with every block's deleter, so blocks that outlive the VM (returned results)
// still account their release correctly.
#pragma once

#include <memory>
#include <span>

#include "kiln/value.h"
#include "kiln/vm.h"

namespace kiln::vm {

class TensorMemory {
 public:
  TensorMemory();
  // A storage block of `bytes` on `device`; throws when the device is unusable.
  Value storage(uint64_t bytes, uint32_t alignment, Device device);
  // Accounts memory allocated outside storage blocks (data-dependent operators).
  void count(uint64_t bytes);
  Tensor copyTo(const Tensor& t, Device device);
  VMMemoryStats stats() const;

 private:
  struct Counters;
  std::shared_ptr<Counters> counters_;
};

// A tensor of `shape` and `dtype` at byte `offset` of the storage value `storage`.
Value placeTensor(const Value& storage, uint64_t offset, std::span<const int64_t> shape, DType dtype);

}  // namespace kiln::vm
