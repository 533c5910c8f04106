// The liveness lower bound of a run: what an ideal memory manager would need.
//
// While enabled, the VM reports every tensor it creates (a birth: kernel outputs,
// data-dependent outputs, copies) and every read of tensor data (kernel and copy
// inputs, tensor conditions), on one clock. A tensor is live from its birth to
// its last read, or to the end when the result holds it; views (reshape) are the
// same data. The bound is, per device, the largest total of tensor bytes (in
// whole 64-byte lines, which a tensor of the pool occupies) live at one tick: no
// schedule of this program's operations in this order can hold less. Tensors
// are keyed by their data address, which is only reused after the previous
// owner is gone.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/value.h"

namespace kiln::vm {

class MemoryTrace {
 public:
  void clear();
  void birth(const Tensor& t);
  void read(const Tensor& t);
  // Everything reachable from the result is read at the end.
  void finish(const Value& result);
  std::vector<std::pair<Device, uint64_t>> lowerBound() const;

 private:
  struct Life {
    uint64_t bytes;
    Device device;
    uint64_t born, lastRead;
  };
  std::vector<Life> lives_;
  std::unordered_map<const void*, uint32_t> byData_;
  uint64_t clock_ = 0;
};

}  // namespace kiln::vm
