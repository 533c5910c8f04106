// The CUDA driver, loaded at run time: `dlopen("libcuda.so.1")` and entry points
// by `cuGetProcAddress`, never linked, so every Kiln binary starts on machines
// without a GPU and says clearly when CUDA is asked for but absent.
//
// Representation: one process-wide table of entry points, filled on first use
// (thread-safe), then immutable. `CudaDriver::get(device)` returns it for a
// `cuda` device (the emulated driver's table, cuda_emu_driver.h, for a
// `cuda-emu` one), or throws a
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

namespace kiln::device {

#if KILN_HAVE_CUDA_H
// The entry points Kiln uses, once: X(member, cuda.h function, name for
// cuGetProcAddress, versioned symbol that cuda.h's macro maps to).
#define KILN_CUDA_ENTRY_POINTS(X)                                                               \
  X(init, cuInit, "cuInit", "cuInit")                                                           \
  X(getErrorString, cuGetErrorString, "cuGetErrorString", "cuGetErrorString")                   \
  X(deviceGetCount, cuDeviceGetCount, "cuDeviceGetCount", "cuDeviceGetCount")                   \
  X(deviceGet, cuDeviceGet, "cuDeviceGet", "cuDeviceGet")                                       \
  X(deviceGetAttribute, cuDeviceGetAttribute, "cuDeviceGetAttribute", "cuDeviceGetAttribute")   \
  X(primaryCtxRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain") \
  X(primaryCtxRelease, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2") \
  X(ctxSetCurrent, cuCtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent")                       \
  X(memAlloc, cuMemAlloc, "cuMemAlloc", "cuMemAlloc_v2")                                        \
  X(memFree, cuMemFree, "cuMemFree", "cuMemFree_v2")                                            \
  X(memcpyHtoD, cuMemcpyHtoD, "cuMemcpyHtoD", "cuMemcpyHtoD_v2")                                \
  X(memcpyDtoH, cuMemcpyDtoH, "cuMemcpyDtoH", "cuMemcpyDtoH_v2")                                \
  X(memcpyHtoDAsync, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2")            \
  X(memcpyDtoHAsync, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2")            \
  X(memcpyDtoDAsync, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2")            \
  X(memGetInfo, cuMemGetInfo, "cuMemGetInfo", "cuMemGetInfo_v2")                                \
  X(deviceGetName, cuDeviceGetName, "cuDeviceGetName", "cuDeviceGetName")                       \
  X(moduleLoadDataEx, cuModuleLoadDataEx, "cuModuleLoadDataEx", "cuModuleLoadDataEx")           \
  X(moduleGetFunction, cuModuleGetFunction, "cuModuleGetFunction", "cuModuleGetFunction")       \
  X(moduleUnload, cuModuleUnload, "cuModuleUnload", "cuModuleUnload")                           \
  X(launchKernel, cuLaunchKernel, "cuLaunchKernel", "cuLaunchKernel")                           \
  X(streamCreate, cuStreamCreate, "cuStreamCreate", "cuStreamCreate")                           \
  X(streamDestroy, cuStreamDestroy, "cuStreamDestroy", "cuStreamDestroy_v2")                    \
  X(streamSynchronize, cuStreamSynchronize, "cuStreamSynchronize", "cuStreamSynchronize")       \
  X(eventCreate, cuEventCreate, "cuEventCreate", "cuEventCreate")                               \
  X(eventDestroy, cuEventDestroy, "cuEventDestroy", "cuEventDestroy_v2")                        \
  X(eventRecord, cuEventRecord, "cuEventRecord", "cuEventRecord")                               \
  X(eventSynchronize, cuEventSynchronize, "cuEventSynchronize", "cuEventSynchronize")           \
  X(eventElapsedTime, cuEventElapsedTime, "cuEventElapsedTime", "cuEventElapsedTime_v2")

struct CudaDriver {
#define KILN_CUDA_MEMBER(member, fn, base, versioned) decltype(&::fn) member = nullptr;
  KILN_CUDA_ENTRY_POINTS(KILN_CUDA_MEMBER)
#undef KILN_CUDA_MEMBER

  int deviceCount = 0;
  bool emulated = false;  // the emulated device's driver

  // The driver of `device`'s kind; throws kiln::Error (one line) when it is
  // unusable here (or `device` is not a GPU).
  static const CudaDriver& get(Device device);
  // Throws kiln::Error("<what>: <driver's message>") unless r is CUDA_SUCCESS.
  void check(CUresult r, const char* what) const;
  // The primary context of GPU `index`, retained once for the process, made
  // current on the calling thread (cheap when it already is).
  CUcontext use(int index) const;
};
#endif

// A GPU's figures, for tools and benchmarks.
struct CudaDeviceInfo {
  std::string name;
  int computeCapability = 0;  // major * 10 + minor
  int multiprocessors = 0;
  int clockKHz = 0;
  uint64_t totalBytes = 0, freeBytes = 0;
};
// Throws kiln::Error when CUDA is unavailable or `device` is not a GPU here.
CudaDeviceInfo cudaDeviceInfo(Device device);

// Empty when the driver of `device`'s kind is usable (for `cuda`: loaded, and
// seeing a GPU); otherwise why not, in one line.
std::string cudaUnavailableReason(Device device = Device{Device::Kind::CUDA, 0});

// Compute capability (major * 10 + minor) of `device`; throws when unavailable.
int cudaComputeCapability(Device device);

}  // namespace kiln::device
