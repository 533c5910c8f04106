// The emulated CUDA driver: memory, contexts, streams, events, modules and
// launches on the host, behind the real driver's table of entry points.
#include "device/cuda_emu_driver.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "device/emu_block.h"

namespace kiln::device {

namespace {

struct Allocation {
  uint64_t size = 0, readable = 0, writable = 0;
  int device = 0;
};

struct Memory {
  std::mutex mu;
  std::map<uintptr_t, Allocation> blocks;
  uint64_t used[kEmulatedGpus] = {};
};
Memory& memory() {
  static Memory* m = new Memory();  // never destroyed: pools free blocks at exit
  return *m;
}

uint64_t budgetBytes() {
  static const uint64_t budget = [] {
    if (const char* v = std::getenv("KILN_CUDA_EMU_MEMORY"); v && *v) {
      char* end = nullptr;
      unsigned long long n = std::strtoull(v, &end, 10);
      if (end && !*end && n > 0) return static_cast<uint64_t>(n);
    }
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
    return std::min<uint64_t>(uint64_t(4) << 30, phys ? phys / 4 : uint64_t(1) << 30);
  }();
  return budget;
}

}  // namespace

void setEmulatedAddressable(const void* p, uint64_t readable, uint64_t writable) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == m.blocks.end()) return;
  it->second.readable = std::min(readable, it->second.size);
  it->second.writable = std::min(writable, it->second.readable);
}

#if KILN_HAVE_CUDA_H

namespace {

struct EmuContext {
  int device;
};
EmuContext gContexts[kEmulatedGpus] = {{0}, {1}};
thread_local int tCurrentDevice = -1;

struct EmuStream {
  int device;
};
struct EmuEvent {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};
struct EmuModule;
struct EmuFunction {
  const EmuModule* module;
  int64_t index;
};
struct EmuModule {
  EmulatedModuleImage image;
  std::vector<EmuFunction> functions;
};

// Loaded modules, until unloaded: like the real driver's, they may stay for the
// life of the process (GpuKernel never unloads its module).
struct Modules {
  std::mutex mu;
  std::map<EmuModule*, std::unique_ptr<EmuModule>> loaded;
};
Modules& modules() {
  static Modules* m = new Modules();
  return *m;
}

// The last failure's report on this thread, which cuGetErrorString returns for its code.
thread_local CUresult tLastCode = CUDA_SUCCESS;
thread_local std::string tLastReport;

CUresult fail(CUresult code, std::string report) {
  tLastCode = code;
  tLastReport = std::move(report);
  return code;
}

// Whether [p, p + bytes) lies in what an allocation lets a copy read or write.
bool addressable(uintptr_t p, uint64_t bytes, bool write, std::string& why) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.blocks.upper_bound(p);
  if (it != m.blocks.begin()) {
    --it;
    const Allocation& a = it->second;
    uint64_t limit = write ? a.writable : a.readable;
    if (p - it->first <= limit && bytes <= limit - (p - it->first)) return true;
    if (p - it->first < a.size) {
      why = a.readable == 0 ? "a block that has been freed"
                            : std::to_string(bytes) + " bytes from offset " + std::to_string(p - it->first) + " of a " +
                                  std::to_string(write ? a.writable : a.readable) + "-byte allocation";
      return false;
    }
  }
  why = "memory that is not an allocation of the emulated device";
  return false;
}

CUresult emuInit(unsigned int) { return CUDA_SUCCESS; }

CUresult emuGetErrorString(CUresult error, const char** str) {
  if (error == tLastCode && !tLastReport.empty()) {
    *str = tLastReport.c_str();
    return CUDA_SUCCESS;
  }
  switch (error) {
    case CUDA_SUCCESS: *str = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *str = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *str = "out of memory"; break;
    case CUDA_ERROR_INVALID_DEVICE: *str = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *str = "invalid device context"; break;
    case CUDA_ERROR_INVALID_IMAGE: *str = "device kernel image is invalid"; break;
    case CUDA_ERROR_NOT_FOUND: *str = "named symbol not found"; break;
    case CUDA_ERROR_INVALID_HANDLE: *str = "invalid resource handle"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *str = "an illegal memory access was encountered"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *str = "unspecified launch failure"; break;
    default: *str = "unknown error"; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult emuDeviceGetCount(int* count) {
  *count = kEmulatedGpus;
  return CUDA_SUCCESS;
}

CUresult emuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= kEmulatedGpus) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult emuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (device < 0 || device >= kEmulatedGpus) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    // Few multiprocessors: the plan's grid-stride launches then make few blocks,
    // which the host runs one after another.
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 2; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1000000; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult emuPrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  if (device < 0 || device >= kEmulatedGpus) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = reinterpret_cast<CUcontext>(&gContexts[device]);
  return CUDA_SUCCESS;
}

CUresult emuPrimaryCtxRelease(CUdevice device) {
  return device < 0 || device >= kEmulatedGpus ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

CUresult emuCtxSetCurrent(CUcontext ctx) {
  tCurrentDevice = ctx ? reinterpret_cast<EmuContext*>(ctx)->device : -1;
  return CUDA_SUCCESS;
}

CUresult emuMemAlloc(CUdeviceptr* p, size_t bytes) {
  if (tCurrentDevice < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Memory& m = memory();
  uint64_t rounded = (uint64_t(bytes) + 255) / 256 * 256;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (rounded < bytes || m.used[tCurrentDevice] + rounded > budgetBytes()) return CUDA_ERROR_OUT_OF_MEMORY;
    m.used[tCurrentDevice] += rounded;
  }
  void* block = std::aligned_alloc(256, rounded);
  std::lock_guard<std::mutex> lock(m.mu);
  if (!block) {
    m.used[tCurrentDevice] -= rounded;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::memset(block, 0xff, rounded);
  m.blocks[reinterpret_cast<uintptr_t>(block)] = Allocation{bytes, bytes, bytes, tCurrentDevice};
  *p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(block));
  return CUDA_SUCCESS;
}

CUresult emuMemFree(CUdeviceptr p) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.blocks.find(static_cast<uintptr_t>(p));
  if (it == m.blocks.end()) return CUDA_ERROR_INVALID_VALUE;
  m.used[it->second.device] -= (it->second.size + 255) / 256 * 256;
  std::free(reinterpret_cast<void*>(it->first));
  m.blocks.erase(it);
  return CUDA_SUCCESS;
}

CUresult copyChecked(void* dst, bool dstDevice, const void* src, bool srcDevice, size_t bytes, const char* what) {
  if (bytes == 0) return CUDA_SUCCESS;
  std::string why;
  if (dstDevice && !addressable(reinterpret_cast<uintptr_t>(dst), bytes, true, why))
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(what) + " of " + std::to_string(bytes) + " bytes writes outside the emulated device's memory: " + why);
  if (srcDevice && !addressable(reinterpret_cast<uintptr_t>(src), bytes, false, why))
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(what) + " of " + std::to_string(bytes) + " bytes reads outside the emulated device's memory: " + why);
  std::memmove(dst, src, bytes);
  return CUDA_SUCCESS;
}

void* host(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

CUresult emuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  return copyChecked(host(dst), true, src, false, bytes, "a copy to the device");
}
CUresult emuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  return copyChecked(dst, false, host(src), true, bytes, "a copy from the device");
}
CUresult emuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream) { return emuMemcpyHtoD(dst, src, bytes); }
CUresult emuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream) { return emuMemcpyDtoH(dst, src, bytes); }
CUresult emuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream) {
  return copyChecked(host(dst), true, host(src), true, bytes, "a copy between device buffers");
}

CUresult emuMemGetInfo(size_t* freeBytes, size_t* total) {
  if (tCurrentDevice < 0) return CUDA_ERROR_INVALID_CONTEXT;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  *total = budgetBytes();
  *freeBytes = budgetBytes() - m.used[tCurrentDevice];
  return CUDA_SUCCESS;
}

CUresult emuDeviceGetName(char* name, int len, CUdevice device) {
  if (device < 0 || device >= kEmulatedGpus) return CUDA_ERROR_INVALID_DEVICE;
  if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "Kiln emulated CUDA device %d (host)", device);
  return CUDA_SUCCESS;
}

CUresult emuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  if (tCurrentDevice < 0) return CUDA_ERROR_INVALID_CONTEXT;
  auto* img = static_cast<const EmulatedModuleImage*>(image);
  if (!img || img->magic != EmulatedModuleImage::kMagic || !img->dispatch)
    return fail(CUDA_ERROR_INVALID_IMAGE, "the emulated device runs host-compiled GPU kernels, not PTX");
  auto owned = std::make_unique<EmuModule>(EmuModule{*img, {}});
  EmuModule* m = owned.get();
  for (size_t i = 0; i < m->image.entries.size(); ++i) m->functions.push_back(EmuFunction{m, static_cast<int64_t>(i)});
  Modules& all = modules();
  std::lock_guard<std::mutex> lock(all.mu);
  all.loaded.emplace(m, std::move(owned));
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult emuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  auto* m = reinterpret_cast<EmuModule*>(module);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < m->image.entries.size(); ++i)
    if (m->image.entries[i] == name) {
      *f = reinterpret_cast<CUfunction>(&m->functions[i]);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult emuModuleUnload(CUmodule module) {
  Modules& all = modules();
  std::lock_guard<std::mutex> lock(all.mu);
  return all.loaded.erase(reinterpret_cast<EmuModule*>(module)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult emuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned sharedBytes, CUstream, void** params, void** extra) {
  if (tCurrentDevice < 0) return CUDA_ERROR_INVALID_CONTEXT;
  auto* fn = reinterpret_cast<const EmuFunction*>(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (!params || extra || sharedBytes > (48u << 10)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t threads = uint64_t(bx) * by * bz;
  if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || gx > 0x7fffffffu || threads == 0 || threads > 1024 ||
      bx > 1024 || by > 1024 || bz > 64)
    return CUDA_ERROR_INVALID_VALUE;
  const EmulatedModuleImage& image = fn->module->image;
  EmuGrid g;
  g.dispatch = image.dispatch;
  g.which = fn->index;
  g.params = params;
  g.grid[0] = gx, g.grid[1] = gy, g.grid[2] = gz;
  g.block[0] = bx, g.block[1] = by, g.block[2] = bz;
  g.name = "kernel " + image.kernel + " (entry " + image.entries[static_cast<size_t>(fn->index)] + ")";
  {
    // The allocations as they are when the grid starts: nothing allocates or
    // frees the memory a running kernel uses.
    Memory& m = memory();
    std::lock_guard<std::mutex> lock(m.mu);
    g.memory.reserve(m.blocks.size());
    for (const auto& [begin, a] : m.blocks) g.memory.push_back(EmuAllocation{begin, a.size, a.readable, a.writable});
  }
  bool invalidAccess = false;
  std::string report = runEmulatedGrid(g, invalidAccess);
  if (report.empty()) return CUDA_SUCCESS;
  return fail(invalidAccess ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_ERROR_LAUNCH_FAILED, std::move(report));
}

CUresult emuStreamCreate(CUstream* stream, unsigned int) {
  if (tCurrentDevice < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *stream = reinterpret_cast<CUstream>(new EmuStream{tCurrentDevice});
  return CUDA_SUCCESS;
}
CUresult emuStreamDestroy(CUstream stream) {
  delete reinterpret_cast<EmuStream*>(stream);
  return CUDA_SUCCESS;
}
CUresult emuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }  // its work ran when it was queued

CUresult emuEventCreate(CUevent* event, unsigned int) {
  *event = reinterpret_cast<CUevent>(new EmuEvent());
  return CUDA_SUCCESS;
}
CUresult emuEventDestroy(CUevent event) {
  delete reinterpret_cast<EmuEvent*>(event);
  return CUDA_SUCCESS;
}
CUresult emuEventRecord(CUevent event, CUstream) {
  auto* e = reinterpret_cast<EmuEvent*>(event);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  e->at = std::chrono::steady_clock::now();
  e->recorded = true;
  return CUDA_SUCCESS;
}
CUresult emuEventSynchronize(CUevent event) { return event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult emuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  auto *a = reinterpret_cast<EmuEvent*>(start), *b = reinterpret_cast<EmuEvent*>(end);
  if (!a || !b || !a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return CUDA_SUCCESS;
}

}  // namespace

const CudaDriver& emulatedCudaDriver() {
  static const CudaDriver driver = [] {
    CudaDriver d;
    d.init = &emuInit;
    d.getErrorString = &emuGetErrorString;
    d.deviceGetCount = &emuDeviceGetCount;
    d.deviceGet = &emuDeviceGet;
    d.deviceGetAttribute = &emuDeviceGetAttribute;
    d.primaryCtxRetain = &emuPrimaryCtxRetain;
    d.primaryCtxRelease = &emuPrimaryCtxRelease;
    d.ctxSetCurrent = &emuCtxSetCurrent;
    d.memAlloc = &emuMemAlloc;
    d.memFree = &emuMemFree;
    d.memcpyHtoD = &emuMemcpyHtoD;
    d.memcpyDtoH = &emuMemcpyDtoH;
    d.memcpyHtoDAsync = &emuMemcpyHtoDAsync;
    d.memcpyDtoHAsync = &emuMemcpyDtoHAsync;
    d.memcpyDtoDAsync = &emuMemcpyDtoDAsync;
    d.memGetInfo = &emuMemGetInfo;
    d.deviceGetName = &emuDeviceGetName;
    d.moduleLoadDataEx = &emuModuleLoadDataEx;
    d.moduleGetFunction = &emuModuleGetFunction;
    d.moduleUnload = &emuModuleUnload;
    d.launchKernel = &emuLaunchKernel;
    d.streamCreate = &emuStreamCreate;
    d.streamDestroy = &emuStreamDestroy;
    d.streamSynchronize = &emuStreamSynchronize;
    d.eventCreate = &emuEventCreate;
    d.eventDestroy = &emuEventDestroy;
    d.eventRecord = &emuEventRecord;
    d.eventSynchronize = &emuEventSynchronize;
    d.eventElapsedTime = &emuEventElapsedTime;
    d.deviceCount = kEmulatedGpus;
    d.emulated = true;
    return d;
  }();
  return driver;
}

#endif

}  // namespace kiln::device
