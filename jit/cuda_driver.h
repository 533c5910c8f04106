// The CUDA driver, loaded at run time: `dlopen("libcuda.so.1")` and entry points
// by `cuGetProcAddress`, never linked, so every Kiln binary starts on machines
// without a GPU and says clearly when CUDA is asked for but absent.
//
// Representation: one process-wide table of entry points, filled on first use
// (thread-safe), then immutable. `CudaDriver::get()` returns it, or throws a
// kiln::Error whose one line says why CUDA cannot be used (no driver library,
// a driver too old for an entry point, cuInit failing, no GPU). The library can
// be named with $KILN_CUDA_DRIVER (tests point it at a file that is not there).
// Every call through the table goes through `check()`, which turns a CUresult
// into a kiln::Error naming the call and the driver's error string.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/tensor.h"

#if KILN_HAVE_CUDA_H
#include <cuda.h>
#endif

namespace kiln::jit {

#if KILN_HAVE_CUDA_H
struct CudaDriver {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuGetErrorString) getErrorString = nullptr;
  decltype(&::cuDeviceGetCount) deviceGetCount = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&::cuMemAlloc) memAlloc = nullptr;
  decltype(&::cuMemFree) memFree = nullptr;
  decltype(&::cuMemcpyHtoD) memcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) memcpyDtoH = nullptr;

  int deviceCount = 0;

  // The loaded driver; throws kiln::Error (one line) when CUDA is unusable here.
  static const CudaDriver& get();
  // Throws kiln::Error("<what>: <driver's message>") unless r is CUDA_SUCCESS.
  void check(CUresult r, const char* what) const;
};
#endif

// Empty when the driver is loaded and sees a GPU; otherwise why not, in one line.
std::string cudaUnavailableReason();

// Compute capability (major * 10 + minor) of `device`; throws when unavailable.
int cudaComputeCapability(Device device);

}  // namespace kiln::jit
