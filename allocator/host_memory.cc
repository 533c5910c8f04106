// Host memory for the pooled allocator, from mimalloc.
#include <mimalloc.h>

#include "kiln/memory.h"

namespace kiln {

namespace {
class HostMemory final : public DeviceMemory {
 public:
  explicit HostMemory(Device device) : device_(device) {}
  Device device() const override { return device_; }
  void* allocate(uint64_t bytes) override { return mi_malloc_aligned(bytes, 64); }
  void free(void* p, uint64_t) override { mi_free(p); }

 private:
  Device device_;
};
}  // namespace

std::unique_ptr<DeviceMemory> hostMemory(Device device) { return std::make_unique<HostMemory>(device); }

}  // namespace kiln
