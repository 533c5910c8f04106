// CompiledKernel (lower, generate, compile) and the kernel cache; calls are in kernel_call.cc.
#include "jit/kernel.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>

#include "device/cuda_driver.h"
#include "kernel_ir/lower.h"
#include "kernel_ir/schedule.h"
#include "jit/codegen_backend.h"
#include "jit/gpu_plan.h"
#include "jit/host_cpu.h"
#include "jit/object_loader.h"
#include "kiln/error.h"
#include "kernel_ir/shape_util.h"

namespace kiln::jit {

using kernel_ir::FusedFunction;
using kernel_ir::computeShapes;
using kernel_ir::lowerToLoops;
using device::cudaComputeCapability;
using device::cudaUnavailableReason;

namespace {

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

namespace {
// The lowering and code generation themselves: bump whenever they change the
// machine code made for an unchanged function, so no disk cache serves old code.
constexpr int kCodegenVersion = 17;

// Everything a compiled kernel depends on: its content, the device, the target
// (the CPU's fingerprint, read without LLVM), LLVM's version and Kiln's own code
// generator's.
// The PTX architecture a GPU gets (its own, capped at what LLVM generates).
int ptxArchitecture(Device device) { return std::min(cudaComputeCapability(device), kMaxPtxSm); }

std::string kernelKey(const FusedFunction& f, Device device, const loop::Schedule& schedule) {
  FusedFunction unnamed = f;
  unnamed.name.clear();
  std::string target;
  if (device.kind == Device::Kind::CUDA) {
    target = "nvptx64|sm_" + std::to_string(ptxArchitecture(device));
  } else if (device.kind == Device::Kind::CudaEmu) {
    // GPU code compiled for this host.
    target = "nvptx64-emulated|" + hostCpuFingerprint();
  } else {
    target = hostCpuFingerprint();
  }
  // The default schedule adds nothing: keys (and disk caches) of untuned kernels stay as they were.
  std::string scheduled = schedule.isDefault() ? "" : "|schedule=" + schedule.toString();
  return unnamed.toString() + "|" + device.toString() + "|" + target + "|llvm" + KILN_LLVM_VERSION + "|codegen" +
         std::to_string(kCodegenVersion) + scheduled;
}
}  // namespace

CompiledKernel::CompiledKernel(FusedFunction f, Device device, bool keepIR, const DiskCache* disk,
                               std::string_view precompiled, const loop::Schedule& schedule,
                               std::shared_ptr<const TuningLog> tuned)
    : f_(std::move(f)), device_(device), disk_(disk) {
  static std::atomic<uint64_t> serials{0};
  serial_ = ++serials;
  // Schedules are the CPU code generator's; other devices compile the default.
  if (device.kind == Device::Kind::CPU && f_.library.empty()) {
    schedule_ = schedule;
    if (tuned) {
      std::string task = taskKey(f_);
      if (tuned->hasTask(task)) {
        tuned_ = std::move(tuned);
        task_ = std::move(task);
      }
    }
  }
  if (device.isGpu()) {
    std::string why = cudaUnavailableReason(device);
    if (!why.empty()) throw Error("kernel " + f_.name + ": " + why);
  }
  f_.verify();
  bool allStatic = true;
  std::vector<Shape> paramShapes;
  for (const auto& p : f_.params) {
    for (int64_t d : p.shape) allStatic &= d >= 0;
    paramShapes.emplace_back(p.shape.begin(), p.shape.end());
  }
  if (allStatic) {
    staticShapes_ = computeShapes(f_, paramShapes);
    for (const Shape& s : *staticShapes_) staticFlat_.insert(staticFlat_.end(), s.begin(), s.end());
  }
  auto t0 = std::chrono::steady_clock::now();
  key_ = kernelKey(f_, device, schedule_);
  if (!f_.library.empty()) {
    // An external library runs it: nothing to lower or compile.
    library_ = makeLibraryKernel(f_, device);
    for (uint32_t w : library_->weightInputs()) prepared_.push_back({w, loop::PreparedLayout::Constant, 0});
    compileMillis_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  uint64_t hash = hashText(key_);
  // One symbol per key: loaded machine code is process-wide (object_loader.h),
  // so caches of different Runtimes asking for one key share it. A kernel kept
  // with its IR is a separate compile under its own name.
  symbol_ = "kiln_" + hex(hash) + (keepIR ? "_ir" : "");
  bool cpu = device.kind == Device::Kind::CPU;
  loops_ = lowerToLoops(f_, {.directConv = cpu && schedule_.directConv,
                             .gemmPostOps = cpu,
                             .splitBorders = cpu,
                             .outputsWriteOnly = cpu && schedule_.streamingStores});
  if (cpu) loop::applySchedule(loops_, schedule_);
  // Only CPU GEMMs read prepacked operands; a GPU kernel gets null pointers.
  if (device.kind == Device::Kind::CPU)
    for (const loop::BufferDecl& b : loops_.buffers)
      if (b.isPrepared()) prepared_.push_back({static_cast<uint32_t>(b.preparedFrom), b.preparedLayout, b.preparedParam});
  if (device.kind == Device::Kind::CUDA) {
    compileForGpu(symbol_, key_, hash, keepIR, disk);
  } else if (device.kind == Device::Kind::CudaEmu) {
    compileForEmulatedGpu(hash, keepIR, disk);
  } else {
    compileForCpu(hash, keepIR, disk, precompiled);
    if (staticShapes_) planStaticCall();
  }
  compileMillis_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool CompiledKernel::loadMachineCode(uint64_t hash, const DiskCache* disk, std::string_view precompiled) {
  // Machine code made elsewhere is used only when it is whole and its key (the
  // kernel, this CPU, this Kiln and LLVM) is this kernel's; a damaged or
  // foreign object is refused by the loader and compiled afresh instead.
  if ((entry_ = loadedKernel(symbol_))) {
    source_ = Source::Loaded;
    if (disk && !disk->load(hash, key_))
      if (const std::string* object = loadedKernelObject(symbol_)) disk->store(hash, key_, *object);
    return true;
  }
  auto tryLoad = [&](std::optional<std::string_view> object, Source source) {
    if (!object) return false;
    try {
      entry_ = loadKernelObject(*object, symbol_);
      source_ = source;
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  if (!precompiled.empty() && tryLoad(unsealObject(precompiled, key_), Source::Precompiled)) return true;
  if (disk) {
    std::optional<std::string> cached = disk->load(hash, key_);
    if (cached && tryLoad(std::string_view(*cached), Source::DiskCache)) return true;
  }
  return false;
}

void CompiledKernel::compileForCpu(uint64_t hash, bool keepIR, const DiskCache* disk, std::string_view precompiled) {
  if (!keepIR && loadMachineCode(hash, disk, precompiled)) return;
  CpuObject compiled = codegenBackend().compileCpu(loops_, symbol_, keepIR);
  entry_ = loadKernelObject(compiled.object, symbol_);
  if (disk && !keepIR) disk->store(hash, key_, compiled.object);
  ir_ = std::move(compiled.optimizedIR);
  source_ = Source::Compiled;
}

std::string CompiledKernel::sealedMachineCode() const {
  if (device_.kind != Device::Kind::CPU || library_) return "";
  const std::string* object = loadedKernelObject(symbol_);
  return object ? sealObject(key_, *object) : "";
}

void CompiledKernel::compileForGpu(const std::string& symbol, const std::string& key, uint64_t hash, bool keepIR,
                                   const DiskCache* disk) {
  PtxModule ptx;
  if (disk && !keepIR) {
    ptx = planPtx(loops_, symbol);
    if (auto text = disk->loadPtx(hash, key, entryPoints(ptx))) {
      ptx.ptx = std::move(*text);
      ptx.sm = ptxArchitecture(device_);
      source_ = Source::DiskCache;
    }
  }
  if (source_ != Source::DiskCache) {
    ptx = codegenBackend().compilePtx(loops_, symbol, ptxArchitecture(device_));
    if (disk && !keepIR) disk->storePtx(hash, key, ptx.ptx);
  }
  if (keepIR) ir_ = ptx.ptx;
  gpu_ = std::make_shared<const GpuKernel>(loops_, std::move(ptx), device_);
}

void CompiledKernel::compileForEmulatedGpu(uint64_t hash, bool keepIR, const DiskCache* disk) {
  // The host object of the GPU code is cached like a CPU kernel's (sealed, under
  // this kernel's key); its plan is recomputed, as for cached PTX.
  PtxModule plan = planPtx(loops_, symbol_);
  plan.sm = kMaxPtxSm;
  if (keepIR || !loadMachineCode(hash, disk, {})) {
    EmulatedGpuObject compiled = codegenBackend().compileGpuEmulated(loops_, symbol_, keepIR);
    entry_ = loadKernelObject(compiled.object.object, symbol_);
    if (disk && !keepIR) disk->store(hash, key_, compiled.object.object);
    ir_ = std::move(compiled.object.optimizedIR);
    source_ = Source::Compiled;
  }
  gpu_ = std::make_shared<const GpuKernel>(loops_, std::move(plan), device_, entry_);
}

KernelCache::KernelCache(const std::string& diskDir) {
  if (!diskDir.empty()) disk_ = std::make_unique<DiskCache>(diskDir);
}

KernelCache& KernelCache::global() {
  const char* dir = std::getenv("KILN_CACHE_DIR");
  static KernelCache cache(dir ? dir : "");
  return cache;
}

void KernelCache::setDiskCacheDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(diskMu_);
  disk_ = dir.empty() ? nullptr : std::make_unique<DiskCache>(dir);
}

void KernelCache::setTuningLog(std::shared_ptr<const TuningLog> log) {
  std::lock_guard<std::mutex> lock(mu_);
  tuning_ = std::move(log);
}

std::shared_ptr<const TuningLog> KernelCache::tuningLog() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tuning_;
}

std::string KernelCache::diskCacheDir() const {
  std::lock_guard<std::mutex> lock(diskMu_);
  return disk_ ? disk_->dir() : "";
}

std::shared_ptr<const CompiledKernel> CompiledKernel::boundTo(Device device) const {
  auto k = std::make_shared<CompiledKernel>(*this);
  k->device_ = device;
  k->variants_ = std::make_shared<Variants>();  // tuned variants are compiled per device
  return k;
}

std::shared_ptr<const CompiledKernel> KernelCache::get(const FusedFunction& f, Device device, bool keepIR,
                                                       std::string_view precompiled) {
  // The whole content, not just its hash, so a hash collision can never alias two kernels.
  // A tuning log's schedule for this kernel: for its static shapes now, or per
  // call for a kernel with `?` dimensions (CompiledKernel::variantFor).
  loop::Schedule schedule;
  std::shared_ptr<const TuningLog> tuning;
  if (device.kind == Device::Kind::CPU && device.index == 0 && f.library.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    tuning = tuning_;
  }
  if (tuning) {
    std::string task = taskKey(f);
    if (tuning->hasTask(task)) {
      std::vector<Shape> shapes;
      bool allStatic = true;
      for (const auto& p : f.params) {
        for (int64_t d : p.shape) allStatic &= d >= 0;
        shapes.emplace_back(p.shape.begin(), p.shape.end());
      }
      if (allStatic) {
        if (auto s = tuning->lookup(task, shapes)) schedule = *s;
        tuning = nullptr;
      }
    } else {
      tuning = nullptr;
    }
  }
  std::string key = kernelKey(f, device, schedule) + (keepIR ? "|ir" : "") + (tuning ? "|tuned-variants" : "");
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  std::shared_future<std::shared_ptr<const CompiledKernel>> future;
  bool compileHere = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kernels_.find(key);
    if (it != kernels_.end()) {
      future = it->second;
      ++hits_;
    } else {
      future = promise.get_future().share();
      kernels_.emplace(key, future);
      compileHere = true;
    }
  }
  if (compileHere) {
    try {
      std::shared_ptr<const CompiledKernel> kernel;
      if (device.kind == Device::Kind::CPU && device.index != 0) {
        // Every CPU device runs the same machine code: compile it once, for cpu,
        // and bind a copy to this device (its tensors are checked against it).
        kernel = get(f, Device{}, keepIR)->boundTo(device);
      } else {
        ++compiles_;
        const DiskCache* disk;
        {
          std::lock_guard<std::mutex> lock(diskMu_);
          disk = disk_.get();
        }
        // The executable's precompiled code is the default schedule's.
        kernel = std::make_shared<const CompiledKernel>(f, device, keepIR, disk,
                                                        schedule.isDefault() ? precompiled : std::string_view(),
                                                        schedule, tuning);
        if (kernel->source() == CompiledKernel::Source::DiskCache) ++diskHits_;
        if (kernel->source() == CompiledKernel::Source::Precompiled) ++precompiledHits_;
        if (kernel->source() == CompiledKernel::Source::Compiled) ++codegens_;
        double sum = kernelMillis_.load();
        while (!kernelMillis_.compare_exchange_weak(sum, sum + kernel->compileMillis())) {
        }
      }
      promise.set_value(std::move(kernel));
    } catch (...) {
      // A failed compile is not cached: report it to every waiter, and let a later request try again.
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mu_);
      kernels_.erase(key);
    }
  }
  return future.get();
}

}  // namespace kiln::jit
