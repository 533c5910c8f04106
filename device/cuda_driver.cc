// Loading the CUDA driver with dlopen and resolving its entry points.
#include "device/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda_emu_driver.h"
#include "kiln/error.h"

namespace kiln::device {

#if KILN_HAVE_CUDA_H

namespace {

struct Loaded {
  CudaDriver driver;
  std::string error;  // empty when usable
};

const Loaded& load() {
  static const Loaded loaded = [] {
    Loaded l;
    const char* name = std::getenv("KILN_CUDA_DRIVER");
    if (!name || !*name) name = "libcuda.so.1";
    void* lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = ::dlerror();
      l.error = std::string("CUDA was asked for, but the CUDA driver (") + name + ") could not be loaded" +
                (why ? std::string(": ") + why : std::string()) + "; is an NVIDIA driver installed?";
      return l;
    }
    // cuGetProcAddress gives the entry point matching the cuda.h this was built
    // with; older drivers without it fall back to the versioned symbol names
    // that cuda.h's macros map to.
    using GetProc = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto getProc = reinterpret_cast<GetProc>(::dlsym(lib, "cuGetProcAddress_v2"));
    CudaDriver& d = l.driver;
    struct Entry {
      void** slot;
      const char* base;       // for cuGetProcAddress
      const char* versioned;  // the symbol cuda.h's macros map to
    };
    const Entry entries[] = {
#define KILN_CUDA_ENTRY(member, fn, base, versioned) {reinterpret_cast<void**>(&d.member), base, versioned},
        KILN_CUDA_ENTRY_POINTS(KILN_CUDA_ENTRY)
#undef KILN_CUDA_ENTRY
    };
    bool complete = true;
    for (const Entry& e : entries) {
      void* p = nullptr;
      CUdriverProcAddressQueryResult status;
      if (getProc && getProc(e.base, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) p = nullptr;
      if (!p) p = ::dlsym(lib, e.versioned);
      if (!p) {
        l.error = std::string("CUDA was asked for, but the driver (") + name + ") lacks " + e.versioned +
                  "; it is older than this build of Kiln needs (CUDA " + std::to_string(CUDA_VERSION / 1000) + ")";
        complete = false;
        break;
      }
      *e.slot = p;
    }
    if (!complete) return l;
    CUresult r = d.init(0);
    if (r != CUDA_SUCCESS) {
      const char* msg = nullptr;
      d.getErrorString(r, &msg);
      l.error = std::string("CUDA was asked for, but the driver did not start (cuInit: ") + (msg ? msg : "unknown error") +
                "); is a GPU present and visible?";
      return l;
    }
    if (d.deviceGetCount(&d.deviceCount) != CUDA_SUCCESS || d.deviceCount == 0)
      l.error = "CUDA was asked for, but the driver sees no GPU";
    return l;
  }();
  return loaded;
}

}  // namespace

const CudaDriver& CudaDriver::get(Device device) {
  if (device.kind == Device::Kind::CudaEmu) return emulatedCudaDriver();
  if (device.kind != Device::Kind::CUDA) throw Error(device.toString() + " is not a GPU");
  const Loaded& l = load();
  if (!l.error.empty()) throw Error(l.error);
  return l.driver;
}

void CudaDriver::check(CUresult r, const char* what) const {
  if (r == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  if (getErrorString) getErrorString(r, &msg);
  throw Error(std::string(what) + ": " + (msg ? msg : "CUDA error " + std::to_string(static_cast<int>(r))));
}

CUcontext CudaDriver::use(int index) const {
  if (index < 0 || index >= deviceCount)
    throw Error(std::string("device ") + (emulated ? "cuda-emu:" : "cuda:") + std::to_string(index) +
                " was asked for, but the driver sees " + std::to_string(deviceCount) + " GPU(s)");
  // Primary contexts are retained once and kept for the life of the process:
  // pooled blocks and loaded modules may outlive any one VM.
  static std::mutex mu;
  static std::vector<CUcontext> contextsOf[2];  // the real driver's, the emulated one's
  thread_local CUcontext current = nullptr;
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<CUcontext>& contexts = contextsOf[emulated];
    if (contexts.empty()) contexts.resize(static_cast<size_t>(deviceCount), nullptr);
    CUcontext& slot = contexts[static_cast<size_t>(index)];
    if (!slot) {
      CUdevice dev;
      check(deviceGet(&dev, index), "cuDeviceGet");
      check(primaryCtxRetain(&slot, dev), "cuDevicePrimaryCtxRetain");
    }
    ctx = slot;
  }
  if (current != ctx) {
    check(ctxSetCurrent(ctx), "cuCtxSetCurrent");
    current = ctx;
  }
  return ctx;
}

std::string cudaUnavailableReason(Device device) { return device.kind == Device::Kind::CudaEmu ? "" : load().error; }

CudaDeviceInfo cudaDeviceInfo(Device device) {
  const CudaDriver& d = CudaDriver::get(device);
  d.use(device.index);
  CUdevice dev;
  d.check(d.deviceGet(&dev, device.index), "cuDeviceGet");
  CudaDeviceInfo info;
  char name[256] = {};
  d.check(d.deviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  info.name = name;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    d.check(d.deviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  info.computeCapability =
      attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 + attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.multiprocessors = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.clockKHz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  size_t freeBytes = 0, total = 0;
  d.check(d.memGetInfo(&freeBytes, &total), "cuMemGetInfo");
  info.freeBytes = freeBytes;
  info.totalBytes = total;
  return info;
}

int cudaComputeCapability(Device device) {
  const CudaDriver& d = CudaDriver::get(device);
  if (device.index >= d.deviceCount)
    throw Error("device " + device.toString() + " was asked for, but the driver sees " + std::to_string(d.deviceCount) + " GPU(s)");
  CUdevice dev;
  d.check(d.deviceGet(&dev, device.index), "cuDeviceGet");
  int major = 0, minor = 0;
  d.check(d.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  d.check(d.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  return major * 10 + minor;
}

#else

std::string cudaUnavailableReason(Device) {
  return "CUDA was asked for, but this build of Kiln has no CUDA support (cuda.h was not found when it was built)";
}

int cudaComputeCapability(Device) { throw Error(cudaUnavailableReason()); }

CudaDeviceInfo cudaDeviceInfo(Device) { throw Error(cudaUnavailableReason()); }

#endif

}  // namespace kiln::device
