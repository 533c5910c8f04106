// Host memory for the pooled allocator: 64-byte aligned blocks from the C library (mimalloc where the app links it).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kiln/memory.h"

namespace kiln {

namespace {
class HostMemory final : public DeviceMemory {
 public:
  explicit HostMemory(Device device) : device_(device) {}
  Device device() const override { return device_; }
  // The runtime links no allocator of its own, so that loading it into a
  // process (Python, an app with its own malloc) never swaps the process's malloc
  // for another; Kiln's tools link mimalloc, which then serves these calls.
  void* allocate(uint64_t bytes) override {
    void* p = nullptr;
    return ::posix_memalign(&p, 64, std::max<uint64_t>(bytes, 1)) == 0 ? p : nullptr;
  }
  void free(void* p, uint64_t) override { std::free(p); }

 private:
  Device device_;
};
}  // namespace

std::unique_ptr<DeviceMemory> hostMemory(Device device) { return std::make_unique<HostMemory>(device); }

namespace {
// A cgroup limit in bytes from `path` (v2 memory.max, v1 memory.limit_in_bytes);
// 0 when there is none ("max", absent, or unreadable).
uint64_t cgroupLimit(const char* path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 19) return 0;
  return std::stoull(v);
}
}  // namespace

uint64_t hostMemoryLimit() {
  static const uint64_t limit = [] {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    uint64_t physical = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
    uint64_t limit = physical;
    for (const char* p : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
      uint64_t c = cgroupLimit(p);
      // cgroup v1 reports "no limit" as a huge number; only a real bound counts.
      if (c > 0 && (limit == 0 || c < limit)) limit = c;
    }
    return limit;
  }();
  return limit;
}

}  // namespace kiln
