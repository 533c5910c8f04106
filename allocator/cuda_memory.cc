// GPU memory from the CUDA driver: cuMemAlloc in the device's primary context.
#include "jit/cuda_driver.h"
#include "kiln/error.h"
#include "kiln/memory.h"

namespace kiln {

#if KILN_HAVE_CUDA_H

namespace {

// Device pointers travel as void* through the pool; they are never dereferenced
// on the host. cuMemAlloc aligns to at least 256 bytes.
class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(Device device) : device_(device), driver_(jit::CudaDriver::get()) {
    if (device.index >= driver_.deviceCount)
      throw Error("device " + device.toString() + " was asked for, but the driver sees " + std::to_string(driver_.deviceCount) +
                  " GPU(s)");
    driver_.check(driver_.deviceGet(&dev_, device.index), "cuDeviceGet");
    driver_.check(driver_.primaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
  }
  ~CudaMemory() override { driver_.primaryCtxRelease(dev_); }

  Device device() const override { return device_; }

  void* allocate(uint64_t bytes) override {
    CUdeviceptr p = 0;
    // A failure is "out of memory" to the pool, which releases its cache and retries.
    if (driver_.ctxSetCurrent(ctx_) != CUDA_SUCCESS || driver_.memAlloc(&p, bytes) != CUDA_SUCCESS) return nullptr;
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }

  void free(void* p, uint64_t) override {
    driver_.ctxSetCurrent(ctx_);
    driver_.memFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)));
  }

 private:
  Device device_;
  const jit::CudaDriver& driver_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceMemory> cudaMemory(Device device) { return std::make_unique<CudaMemory>(device); }

#else

std::unique_ptr<DeviceMemory> cudaMemory(Device) { throw Error(jit::cudaUnavailableReason()); }

#endif

}  // namespace kiln
