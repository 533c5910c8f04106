// CompiledKernel (lower, generate, compile; check and run) and the kernel cache.
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
using device::CudaStream;
using device::streamFor;
using device::cudaComputeCapability;
using device::cudaUnavailableReason;

namespace {

// Scratch memory of CPU kernel calls (a GEMM's result before its epilogue, a
// convolution's output): a per-thread block reused call after call, so a kernel
// call allocates nothing once warm. Frames nest (stack discipline); a block in
// use is never moved, so a call that does not fit takes pooled memory instead.
class ScratchArena {
 public:
  static constexpr size_t kMaxBytes = size_t(16) << 20;  // larger scratch comes from the pool

  class Frame {
   public:
    Frame() : arena_(instance()), mark_(arena_.used_) {}
    ~Frame() { arena_.used_ = mark_; }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;
    // `bytes` of 64-byte-aligned memory valid until this frame ends, or null.
    void* take(size_t bytes) {
      size_t need = (bytes + 63) / 64 * 64;
      if (need > kMaxBytes || arena_.used_ + need > kMaxBytes) return nullptr;
      if (!arena_.block_) {
        if (arena_.used_ != 0) return nullptr;
        arena_.block_.reset(static_cast<char*>(::operator new(kMaxBytes, std::align_val_t(64))));
      }
      void* p = arena_.block_.get() + arena_.used_;
      arena_.used_ += need;
      return p;
    }

   private:
    ScratchArena& arena_;
    size_t mark_;
  };

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  static ScratchArena& instance() {
    thread_local ScratchArena arena;
    return arena;
  }
  std::unique_ptr<char, Free> block_;
  size_t used_ = 0;
};

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

namespace {
// The lowering and code generation themselves: bump whenever they change the
// machine code made for an unchanged function, so no disk cache serves old code.
constexpr int kCodegenVersion = 14;

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
  loops_ = lowerToLoops(f_, {.directConv = cpu && schedule_.directConv, .gemmPostOps = cpu, .splitBorders = cpu});
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

const std::vector<Shape>& CompiledKernel::checkedShapes(TensorRefs inputs, std::vector<Shape>& storage) const {
  if (staticShapes_) {
    // Every shape is fixed: check the inputs and reuse the shapes computed once.
    bool match = inputs.size() == f_.params.size();
    for (size_t i = 0; match && i < inputs.size(); ++i) {
      const Tensor& t = *inputs[i];
      match = t.defined() && t.dtype() == f_.params[i].dtype && t.device() == device_ && t.rank() == f_.params[i].rank() &&
              std::equal(t.shape().begin(), t.shape().end(), f_.params[i].shape.begin());
    }
    if (match) return *staticShapes_;
    storage = shapesFor(inputs);  // the general path, with its precise errors
    return storage;
  }
  // `?` dimensions: a loop calls a kernel with the same input shapes again and
  // again, and inferring every value's shape each time (allocating as it goes)
  // cost microseconds a call. Each thread keeps the shapes of the last inputs
  // per kernel in a small direct-mapped memo, keyed by the kernel's serial and
  // the inputs' dtype, device and dimensions; an entry is made only after
  // shapesFor has checked those inputs. The reference returned is valid until
  // this thread's next call here, which the caller does not make before it is
  // done with it (launch calls no other kernel's checks).
  struct Memo {
    uint64_t serial = 0;
    boost::container::small_vector<int64_t, 40> key;
    std::vector<Shape> shapes;
  };
  // On the heap, a pointer in TLS: the library's static TLS block is small (the
  // Python module dlopens it) and 16 entries would not fit there.
  thread_local std::unique_ptr<std::array<Memo, 16>> memo;
  if (!memo) memo = std::make_unique<std::array<Memo, 16>>();
  boost::container::small_vector<int64_t, 40> key;
  for (const Tensor* t : inputs) {
    if (!t->defined()) return storage = shapesFor(inputs);
    key.push_back(static_cast<int64_t>(t->dtype()) << 32 | static_cast<int64_t>(t->rank()));
    key.push_back(static_cast<int64_t>(t->device().kind) << 32 | static_cast<int64_t>(t->device().index));
    key.insert(key.end(), t->shape().begin(), t->shape().end());
  }
  Memo& m = (*memo)[serial_ % memo->size()];
  if (m.serial == serial_ && std::equal(key.begin(), key.end(), m.key.begin(), m.key.end())) return m.shapes;
  std::vector<Shape> shapes = shapesFor(inputs);  // throws for bad inputs: nothing is remembered
  m.serial = serial_;
  m.key.assign(key.begin(), key.end());
  m.shapes = std::move(shapes);
  return m.shapes;
}

const CompiledKernel& CompiledKernel::variantFor(TensorRefs inputs) const {
  if (!tuned_) return *this;
  if (inputs.size() != f_.params.size()) return *this;  // the call's own check reports it
  // The inputs' shapes, flattened with each rank first: a loop calls a kernel
  // with the same shapes again and again, and then only these are compared.
  boost::container::small_vector<int64_t, 32> dims;
  for (const Tensor* t : inputs) {
    if (!t->defined()) return *this;
    dims.push_back(static_cast<int64_t>(t->rank()));
    dims.insert(dims.end(), t->shape().begin(), t->shape().end());
  }
  std::lock_guard<std::mutex> lock(variants_->mu);
  Variants& vs = *variants_;
  if (vs.last && std::equal(dims.begin(), dims.end(), vs.lastDims.begin(), vs.lastDims.end())) return *vs.last;
  std::vector<Shape> shapes;
  for (const Tensor* t : inputs) shapes.push_back(t->shape());
  std::optional<loop::Schedule> s = tuned_->lookup(task_, shapes);
  const CompiledKernel* chosen = this;
  if (s && !(*s == schedule_)) {
    std::shared_ptr<const CompiledKernel>& v = vs.bySchedule[s->toString()];
    if (!v) v = std::make_shared<const CompiledKernel>(f_, device_, false, disk_, std::string_view(), *s);
    chosen = v.get();
  }
  vs.lastDims.assign(dims.begin(), dims.end());
  vs.last = chosen;
  return *chosen;
}

std::vector<Shape> CompiledKernel::shapesFor(TensorRefs inputs) const {
  if (inputs.size() != f_.params.size())
    throw Error("kernel " + f_.name + " takes " + std::to_string(f_.params.size()) + " input(s), but " +
                std::to_string(inputs.size()) + " were given");
  std::vector<Shape> paramShapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = *inputs[i];
    if (!t.defined()) throw Error("kernel " + f_.name + ": input " + std::to_string(i) + " is undefined");
    if (t.dtype() != f_.params[i].dtype)
      throw Error("kernel " + f_.name + ": input " + std::to_string(i) + " has dtype " + std::string(dtypeName(t.dtype())) +
                  " but the kernel expects " + ops::descToString(f_.params[i]));
    if (!(t.device() == device_))
      throw Error("kernel " + f_.name + ": input " + std::to_string(i) + " is on " + t.device().toString() +
                  " but the kernel runs on " + device_.toString());
    paramShapes.push_back(t.shape());
  }
  return computeShapes(f_, paramShapes);
}

void CompiledKernel::launch(TensorRefs inputs, TensorRefs outputs,
                            const std::vector<Shape>& shapes, std::span<const float* const> prepared) const {
  if (library_) {
    library_->run(inputs, outputs, shapes, prepared);
    return;
  }
  // Small fixed-size arrays cover almost every kernel without a heap allocation;
  // a kernel of static shapes passes the shape array it flattened once.
  boost::container::small_vector<int64_t, 64> flat;
  bool fixed = staticShapes_ && &shapes == &*staticShapes_;
  if (!fixed)
    for (const Shape& s : shapes) flat.insert(flat.end(), s.begin(), s.end());
  const int64_t* shapeArray = fixed ? staticFlat_.data() : flat.data();
  // The kernel's arguments, in loops_.buffers order; on the stack for up to 16
  // (small_vector's push_back was an out-of-line call per buffer, and a tree
  // node's kernel call makes several).
  size_t numBuffers = std::max(loops_.buffers.size(), inputs.size() + outputs.size());
  void* onStack[16];
  std::unique_ptr<void*[]> onHeap;
  void** buffers = onStack;
  if (numBuffers > std::size(onStack)) {
    onHeap = std::make_unique<void*[]>(numBuffers);
    buffers = onHeap.get();
  }
  size_t nextBuffer = 0;
  for (const Tensor* t : inputs) buffers[nextBuffer++] = t->data();
  for (const Tensor* t : outputs) buffers[nextBuffer++] = t->data();
  // Scratch buffers (values kept in memory inside the kernel, e.g. a GEMM result
  // before its epilogue) live for this call.
  boost::container::small_vector<Tensor, 2> scratch;
  std::optional<ScratchArena::Frame> arena;  // CPU scratch for this call, from the thread's arena
  size_t nextPrepared = 0;
  for (size_t b = inputs.size() + outputs.size(); b < loops_.buffers.size(); ++b) {
    const loop::BufferDecl& decl = loops_.buffers[b];
    if (decl.isPrepared()) {
      // In preparedInputs() order; the GEMM reads B itself when none is given.
      const float* p = nextPrepared < prepared.size() ? prepared[nextPrepared] : nullptr;
      ++nextPrepared;
      buffers[nextBuffer++] = const_cast<float*>(p);
      continue;
    }
    int64_t n = 1;
    if (decl.scratchValue >= 0) {
      for (int64_t d : shapes[static_cast<size_t>(decl.scratchValue)]) n *= d;
    } else {
      for (int64_t f : decl.scratchSize) n *= f >= 0 ? f : shapeArray[-f - 1];
    }
    if (!gpu_ && !arena) arena.emplace();
    if (void* p = gpu_ ? nullptr : arena->take(static_cast<size_t>(n) * dtypeSize(decl.dtype))) {
      buffers[nextBuffer++] = p;
      continue;
    }
    scratch.push_back(Tensor::empty(decl.dtype, {n}, device_));
    buffers[nextBuffer++] = scratch.back().data();
  }
  if (gpu_) {
    bool synchronous = false;
    CudaStream& stream = streamFor(device_, synchronous);
    gpu_->run(buffers, shapeArray, fixed ? staticFlat_.size() : flat.size(), stream);
    // Scratch blocks go back to the pool tagged with this stream, so no other
    // stream reuses them before these launches have run.
    if (synchronous) stream.synchronize();
    return;
  }
  entry_(buffers, shapeArray);
}

namespace {
// Pointers to each tensor of a span, for the reference-based interface.
boost::container::small_vector<const Tensor*, 16> refsOf(std::span<const Tensor> ts) {
  boost::container::small_vector<const Tensor*, 16> refs;
  for (const Tensor& t : ts) refs.push_back(&t);
  return refs;
}
}  // namespace

std::vector<Tensor> CompiledKernel::operator()(std::span<const Tensor> inputs) const {
  auto in = refsOf(inputs);
  TensorRefs ins(in.data(), in.size());
  std::vector<Shape> storage;
  const std::vector<Shape>& shapes = checkedShapes(ins, storage);
  std::vector<Tensor> outputs;
  for (int32_t o : f_.outputs) outputs.push_back(Tensor::empty(f_.typeOf(o).dtype, shapes[static_cast<size_t>(o)], device_));
  auto out = refsOf(outputs);
  launch(ins, TensorRefs(out.data(), out.size()), shapes, {});
  return outputs;
}

std::vector<Shape> CompiledKernel::shapesFor(std::span<const Tensor> inputs) const {
  auto in = refsOf(inputs);
  return shapesFor(TensorRefs(in.data(), in.size()));
}

void CompiledKernel::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                         std::span<const float* const> prepared) const {
  auto in = refsOf(inputs), out = refsOf(outputs);
  run(TensorRefs(in.data(), in.size()), TensorRefs(out.data(), out.size()), prepared);
}

void CompiledKernel::run(TensorRefs inputs, TensorRefs outputs, std::span<const float* const> prepared) const {
  std::vector<Shape> storage;
  const std::vector<Shape>& shapes = checkedShapes(inputs, storage);
  if (outputs.size() != f_.outputs.size())
    throw Error("kernel " + f_.name + " has " + std::to_string(f_.outputs.size()) + " output(s), but " +
                std::to_string(outputs.size()) + " were given");
  for (size_t i = 0; i < outputs.size(); ++i) {
    int32_t o = f_.outputs[i];
    const Tensor& t = *outputs[i];
    const Shape& want = shapes[static_cast<size_t>(o)];
    if (!t.defined() || t.dtype() != f_.typeOf(o).dtype || t.shape() != want || !(t.device() == device_))
      throw Error("kernel " + f_.name + ": output " + std::to_string(i) + " must be " + shapeString(want) + "x" +
                  std::string(dtypeShortName(f_.typeOf(o).dtype)) + " on " + device_.toString());
  }
  launch(inputs, outputs, shapes, prepared);
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
