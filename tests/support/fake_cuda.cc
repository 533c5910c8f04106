// A stand-in CUDA driver for tests on machines without a GPU: a shared library
// that Kiln loads through $KILN_CUDA_DRIVER. Memory is host memory, copies are
// memcpy, streams and events do nothing (every call completes at once), and
// kernels are not run: a launch is checked (the entry exists in the loaded PTX)
// and logged to $KILN_FAKE_CUDA_LOG as `launch <entry> grid X Y Z block B`.
// It exercises everything of the CUDA path but the GPU itself: loading the
// driver, contexts, pools, streams, copies, module loading, the launch plan,
// event timing and the disk cache.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <string>

namespace {

struct FakeModule {
  std::string ptx;
};
struct FakeFunction {
  std::string name;
};
// Owned here for the process (Kiln keeps modules loaded, as a driver would
// until exit); a list never moves what it holds.
std::list<FakeModule> modules;
std::list<FakeFunction> functions;
std::mutex mu;

CUresult fakeInit(unsigned) { return CUDA_SUCCESS; }
CUresult fakeGetErrorString(CUresult, const char** s) {
  *s = "fake driver error";
  return CUDA_SUCCESS;
}
CUresult fakeDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult fakeDeviceGet(CUdevice* d, int i) {
  if (i != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult fakeDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1000000; break;
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult fakeDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<size_t>(len), "Kiln fake GPU");
  return CUDA_SUCCESS;
}
int contextToken;
CUresult fakePrimaryCtxRetain(CUcontext* c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(&contextToken);
  return CUDA_SUCCESS;
}
CUresult fakePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult fakeCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult fakeMemAlloc(CUdeviceptr* p, size_t n) {
  void* m = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(m, 0, n);
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}
CUresult fakeMemFree(CUdeviceptr p) {
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
CUresult fakeMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) {
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return CUDA_SUCCESS;
}
CUresult fakeMemcpyDtoH(void* d, CUdeviceptr s, size_t n) {
  std::memcpy(d, reinterpret_cast<const void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult fakeMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream) { return fakeMemcpyHtoD(d, s, n); }
CUresult fakeMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream) { return fakeMemcpyDtoH(d, s, n); }
CUresult fakeMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) {
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult fakeMemGetInfo(size_t* freeBytes, size_t* total) {
  *freeBytes = *total = size_t(16) << 30;
  return CUDA_SUCCESS;
}
CUresult fakeModuleLoadDataEx(CUmodule* m, const void* image, unsigned, CUjit_option*, void**) {
  std::string ptx(static_cast<const char*>(image));
  if (ptx.find(".target sm_") == std::string::npos) return CUDA_ERROR_INVALID_PTX;
  std::lock_guard<std::mutex> lock(mu);
  modules.push_back(FakeModule{ptx});
  *m = reinterpret_cast<CUmodule>(&modules.back());
  return CUDA_SUCCESS;
}
CUresult fakeModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  const FakeModule* mod = reinterpret_cast<const FakeModule*>(m);
  if (mod->ptx.find(std::string(".entry ") + name + "(") == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard<std::mutex> lock(mu);
  functions.push_back(FakeFunction{name});
  *f = reinterpret_cast<CUfunction>(&functions.back());
  return CUDA_SUCCESS;
}
CUresult fakeModuleUnload(CUmodule) { return CUDA_SUCCESS; }
CUresult fakeLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned, unsigned, unsigned,
                          CUstream, void** params, void**) {
  if (!params || gx == 0 || gy == 0 || gz == 0 || bx == 0) return CUDA_ERROR_INVALID_VALUE;
  if (const char* log = std::getenv("KILN_FAKE_CUDA_LOG")) {
    if (FILE* out = std::fopen(log, "a")) {
      std::fprintf(out, "launch %s grid %u %u %u block %u\n", reinterpret_cast<const FakeFunction*>(f)->name.c_str(), gx, gy,
                   gz, bx);
      std::fclose(out);
    }
  }
  return CUDA_SUCCESS;
}
int streamToken;
CUresult fakeStreamCreate(CUstream* s, unsigned) {
  *s = reinterpret_cast<CUstream>(&streamToken);
  return CUDA_SUCCESS;
}
CUresult fakeStreamDestroy(CUstream) { return CUDA_SUCCESS; }
CUresult fakeStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult fakeEventCreate(CUevent* e, unsigned) {
  *e = reinterpret_cast<CUevent>(new int(0));
  return CUDA_SUCCESS;
}
CUresult fakeEventDestroy(CUevent e) {
  delete reinterpret_cast<int*>(e);
  return CUDA_SUCCESS;
}
CUresult fakeEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult fakeEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult fakeEventElapsedTime(float* ms, CUevent, CUevent) {
  *ms = 0.001f;
  return CUDA_SUCCESS;
}

struct Entry {
  const char* name;
  void* fn;
};
const Entry kEntries[] = {
    {"cuInit", reinterpret_cast<void*>(&fakeInit)},
    {"cuGetErrorString", reinterpret_cast<void*>(&fakeGetErrorString)},
    {"cuDeviceGetCount", reinterpret_cast<void*>(&fakeDeviceGetCount)},
    {"cuDeviceGet", reinterpret_cast<void*>(&fakeDeviceGet)},
    {"cuDeviceGetAttribute", reinterpret_cast<void*>(&fakeDeviceGetAttribute)},
    {"cuDeviceGetName", reinterpret_cast<void*>(&fakeDeviceGetName)},
    {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&fakePrimaryCtxRetain)},
    {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(&fakePrimaryCtxRelease)},
    {"cuCtxSetCurrent", reinterpret_cast<void*>(&fakeCtxSetCurrent)},
    {"cuMemAlloc", reinterpret_cast<void*>(&fakeMemAlloc)},
    {"cuMemFree", reinterpret_cast<void*>(&fakeMemFree)},
    {"cuMemcpyHtoD", reinterpret_cast<void*>(&fakeMemcpyHtoD)},
    {"cuMemcpyDtoH", reinterpret_cast<void*>(&fakeMemcpyDtoH)},
    {"cuMemcpyHtoDAsync", reinterpret_cast<void*>(&fakeMemcpyHtoDAsync)},
    {"cuMemcpyDtoHAsync", reinterpret_cast<void*>(&fakeMemcpyDtoHAsync)},
    {"cuMemcpyDtoDAsync", reinterpret_cast<void*>(&fakeMemcpyDtoDAsync)},
    {"cuMemGetInfo", reinterpret_cast<void*>(&fakeMemGetInfo)},
    {"cuModuleLoadDataEx", reinterpret_cast<void*>(&fakeModuleLoadDataEx)},
    {"cuModuleGetFunction", reinterpret_cast<void*>(&fakeModuleGetFunction)},
    {"cuModuleUnload", reinterpret_cast<void*>(&fakeModuleUnload)},
    {"cuLaunchKernel", reinterpret_cast<void*>(&fakeLaunchKernel)},
    {"cuStreamCreate", reinterpret_cast<void*>(&fakeStreamCreate)},
    {"cuStreamDestroy", reinterpret_cast<void*>(&fakeStreamDestroy)},
    {"cuStreamSynchronize", reinterpret_cast<void*>(&fakeStreamSynchronize)},
    {"cuEventCreate", reinterpret_cast<void*>(&fakeEventCreate)},
    {"cuEventDestroy", reinterpret_cast<void*>(&fakeEventDestroy)},
    {"cuEventRecord", reinterpret_cast<void*>(&fakeEventRecord)},
    {"cuEventSynchronize", reinterpret_cast<void*>(&fakeEventSynchronize)},
    {"cuEventElapsedTime", reinterpret_cast<void*>(&fakeEventElapsedTime)},
};

}  // namespace

extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t,
                                                 CUdriverProcAddressQueryResult* status) {
  for (const Entry& e : kEntries)
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *pfn = nullptr;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
