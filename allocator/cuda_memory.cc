// GPU memory from the CUDA driver (real or emulated): cuMemAlloc in the device's primary context.
#include "device/cuda_driver.h"
#include "device/cuda_emu_driver.h"
#include "device/cuda_stream.h"
#include "kiln/error.h"
#include "kiln/memory.h"

namespace kiln {

#if KILN_HAVE_CUDA_H

namespace {

// Device pointers travel as void* through the pool; they are never dereferenced
// on the host. cuMemAlloc aligns to at least 256 bytes.
class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(Device device) : device_(device), driver_(device::CudaDriver::get(device)) { driver_.use(device.index); }

  Device device() const override { return device_; }

  void* allocate(uint64_t bytes) override {
    CUdeviceptr p = 0;
    // A failure is "out of memory" to the pool, which releases its cache and retries.
    driver_.use(device_.index);
    if (driver_.memAlloc(&p, bytes) != CUDA_SUCCESS) return nullptr;
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }

  void free(void* p, uint64_t) override {
    try {
      driver_.use(device_.index);
    } catch (const Error&) {
      return;  // the context is gone (process exit): nothing left to free into
    }
    driver_.memFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)));
  }

  // Blocks freed while a stream may still use them carry that stream's tag.
  uint64_t streamTag() const override { return device::currentStreamTag(device_); }
  void awaitStream(uint64_t tag) override { device::awaitStreamTag(tag); }
  void setAddressable(void* p, uint64_t readable, uint64_t writable) override {
    if (driver_.emulated) device::setEmulatedAddressable(p, readable, writable);
  }

 private:
  Device device_;
  const device::CudaDriver& driver_;
};

}  // namespace

std::unique_ptr<DeviceMemory> cudaMemory(Device device) { return std::make_unique<CudaMemory>(device); }

#else

std::unique_ptr<DeviceMemory> cudaMemory(Device device) { throw Error(device::cudaUnavailableReason(device)); }

#endif

}  // namespace kiln
