// Compiled kernels and the kernel cache: the C++ interface for compiling a fused
// function for a device and running it on tensors.
//
// KernelCache::get compiles a kernel_ir::FusedFunction on first request and returns the same
// CompiledKernel for every later one. Keys are the function's content together
// with the device and the target (CPU name, features, LLVM version); concurrent
// requests for one kernel compile it once, the others wait for that result.
// CompiledKernel is immutable and safe to run from many threads at once.
//
// A CPU kernel's machine code comes from the first of: this process (another
// cache loaded the same key), the executable's precompiled section, the disk
// cache, and the code generator (jit/codegen_backend.h), which is the only one
// that loads LLVM. Whatever its source, the code is a relocatable object that
// object_loader.h maps; one whose key or checksum does not match is never run.
//
// On a GPU (cuda:N) the kernel is PTX for the GPU's architecture, loaded into
// the driver; run() queues its launches on the calling thread's current stream
// (cuda_stream.h) and returns without waiting, or waits when no stream is
// current (the synchronous C++ interface). Its tensors must be on that GPU.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit/cuda_kernel.h"
#include "jit/disk_cache.h"
#include "jit/library_kernel.h"
#include "jit/object_loader.h"
#include "jit/tuning_log.h"
#include "kernel_ir/fused_function.h"
#include "kernel_ir/loop_ir.h"
#include "kiln/tensor.h"

namespace kiln::jit {

class CompiledKernel {
 public:
  // `precompiled`: a sealed object for this kernel (sealObject), used when it matches.
  // `schedule`: how to compile it (a CPU kernel; kernel_ir/schedule.h). `tuned`:
  // a tuning log with records for this kernel's `?` shapes; each call then runs
  // the variant compiled with the schedule of the nearest tuned shape.
  CompiledKernel(kernel_ir::FusedFunction f, Device device, bool keepIR, const DiskCache* disk = nullptr,
                 std::string_view precompiled = {}, const loop::Schedule& schedule = {},
                 std::shared_ptr<const TuningLog> tuned = nullptr);
  // Where the machine code came from.
  enum class Source : uint8_t { Compiled, Loaded, DiskCache, Precompiled };
  Source source() const { return source_; }
  bool fromDiskCache() const { return source_ == Source::DiskCache; }
  // The kernel's key (its content, device, target and compiler versions).
  const std::string& key() const { return key_; }
  // A CPU kernel's machine code sealed with its key, for an executable's
  // precompiled section ("" on a GPU).
  std::string sealedMachineCode() const;
  // The same machine code serving another device of the same kind (cpu:1).
  std::shared_ptr<const CompiledKernel> boundTo(Device device) const;

  const kernel_ir::FusedFunction& function() const { return f_; }
  const loop::Schedule& schedule() const { return schedule_; }
  Device device() const { return device_; }
  const loop::LoopKernel& loops() const { return loops_; }
  const std::string& optimizedIR() const { return ir_; }  // CPU: LLVM IR; GPU: PTX (when kept)
  double compileMillis() const { return compileMillis_; }

  // Runs the kernel; allocates and returns its outputs. Inputs are checked against
  // the kernel's parameter types (count, dtype, rank, static dimensions): a
  // mismatch is a kiln::Error naming the input.
  std::vector<Tensor> operator()(std::span<const Tensor> inputs) const;

  // Destination passing: writes into `outputs`, which must have the kernel's
  // output dtypes and the shapes its shape function gives for these inputs.
  // `prepared` has one pointer per preparedInputs() entry: that input packed by
  // jit::packGemmB (made once for a constant weight and shared), or null. A
  // packed form made for another shape is detected and ignored.
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs,
           std::span<const float* const> prepared = {}) const;
  // The same over tensors the caller holds elsewhere (a VM's registers): no copies.
  using TensorRefs = std::span<const Tensor* const>;
  // The kernel that runs these inputs: this one, or the variant compiled for the
  // nearest tuned shape when a tuning log covers this kernel's `?` shapes.
  const CompiledKernel& variantFor(TensorRefs inputs) const { return tuned_ ? tunedVariantFor(inputs) : *this; }
  void run(TensorRefs inputs, TensorRefs outputs, std::span<const float* const> prepared = {}) const {
    if (!staticCall_ || !runStatic(inputs, outputs, prepared)) runChecked(inputs, outputs, prepared);
  }

  // Inputs this kernel reads faster when given prepacked: float32 matrices used
  // whole as the B operand of a GEMM (a dense or matmul weight), convolution filters.
  struct PreparedInput {
    uint32_t input;
    loop::PreparedLayout layout;
    int64_t param;  // GemmB: 1 when B is stored n x k (a dense weight); ConvFilter: groups
  };
  const std::vector<PreparedInput>& preparedInputs() const { return prepared_; }

  // The concrete shape of every value for these inputs (checked against the kernel).
  std::vector<Shape> shapesFor(std::span<const Tensor> inputs) const;
  std::vector<Shape> shapesFor(TensorRefs inputs) const;

 private:
  kernel_ir::FusedFunction f_;
  Device device_;
  loop::LoopKernel loops_;
  void compileForCpu(uint64_t hash, bool keepIR, const DiskCache* disk, std::string_view precompiled);
  void compileForGpu(const std::string& symbol, const std::string& key, uint64_t hash, bool keepIR, const DiskCache* disk);
  void compileForEmulatedGpu(uint64_t hash, bool keepIR, const DiskCache* disk);
  // Host machine code for this kernel already made (loaded in this process, in
  // `precompiled`, or in the disk cache): sets entry_ and source_, or false.
  bool loadMachineCode(uint64_t hash, const DiskCache* disk, std::string_view precompiled);
  void launch(TensorRefs inputs, TensorRefs outputs, const std::vector<Shape>& shapes,
              std::span<const float* const> prepared) const;
  std::vector<PreparedInput> prepared_;
  // shapesFor, or the shapes computed once when every dimension is static.
  const std::vector<Shape>& checkedShapes(TensorRefs inputs, std::vector<Shape>& storage) const;
  std::optional<std::vector<Shape>> staticShapes_;
  std::vector<int64_t> staticFlat_;  // staticShapes_ flattened: the kernel's shape array

  // A host kernel whose every shape is static is called through a plan made once
  // (kernel_call.cc): each operand's dtype, rank and dimensions in one array, and
  // what each further buffer is (a prepared input, or scratch of a fixed size).
  // The call then compares the operands against it and passes their pointers
  // with no shape work; an operand that does not match, or scratch the arena
  // cannot give, takes the general path (runChecked), whose errors are precise.
  struct StaticCall {
    struct Operand {
      DType dtype;
      uint32_t rank;
      uint32_t dims;  // offset of its dimensions in `dims`
    };
    std::vector<Operand> operands;  // the inputs, then the outputs
    uint32_t numInputs = 0;
    std::vector<int64_t> dims;
    struct Extra {
      int32_t prepared;  // >= 0: that entry of the call's prepared pointers; else scratch
      uint64_t scratchBytes;
    };
    std::vector<Extra> extras;  // loops_.buffers after the operands, in order
  };
  static constexpr size_t kStaticCallBuffers = 16;  // the plan's buffer array lives on the stack
  std::optional<StaticCall> staticCall_;
  void planStaticCall();
  bool runStatic(TensorRefs inputs, TensorRefs outputs, std::span<const float* const> prepared) const;
  void runChecked(TensorRefs inputs, TensorRefs outputs, std::span<const float* const> prepared) const;
  const CompiledKernel& tunedVariantFor(TensorRefs inputs) const;
  // Process-unique, never reused: the key of this kernel's entries in the
  // per-thread memo of shapes for `?` dimensions (checkedShapes).
  uint64_t serial_ = 0;

  loop::Schedule schedule_;
  // Tuned variants of a kernel with `?` dimensions, by schedule text; made on first use.
  std::shared_ptr<const TuningLog> tuned_;
  std::string task_;
  const DiskCache* disk_ = nullptr;
  struct Variants {
    std::mutex mu;
    std::unordered_map<std::string, std::shared_ptr<const CompiledKernel>> bySchedule;
    // The last call's shapes (variantFor's flattening) and the kernel they chose.
    std::vector<int64_t> lastDims;
    const CompiledKernel* last = nullptr;
  };
  std::shared_ptr<Variants> variants_ = std::make_shared<Variants>();

  std::string ir_;
  KernelEntry entry_ = nullptr;                // on a CPU device
  std::shared_ptr<const GpuKernel> gpu_;       // on a GPU
  std::shared_ptr<const LibraryKernel> library_;  // when an external library runs it (f_.library)
  double compileMillis_ = 0;
  Source source_ = Source::Compiled;
  std::string key_, symbol_;
};

class KernelCache {
 public:
  // An empty cache; `diskDir` names its on-disk cache ("": none). Runtimes own one each.
  explicit KernelCache(const std::string& diskDir = "");
  // The process's cache (the default Runtime's), its disk directory from $KILN_CACHE_DIR.
  static KernelCache& global();

  // Compiles on first use; `keepIR` keeps the optimized LLVM IR for printing.
  // `precompiled` is the executable's sealed machine code for `f`, if it has some.
  std::shared_ptr<const CompiledKernel> get(const kernel_ir::FusedFunction& f, Device device = {}, bool keepIR = false,
                                            std::string_view precompiled = {});

  size_t hits() const { return hits_; }
  size_t compiles() const { return compiles_; }  // kernels made: compiled, or loaded from elsewhere
  size_t diskHits() const { return diskHits_; }
  size_t precompiledHits() const { return precompiledHits_; }
  size_t codegens() const { return codegens_; }  // compiled by the code generator (LLVM)
  double kernelMillis() const { return kernelMillis_.load(); }  // making kernels, summed over threads

  // The tuning log whose schedules kernels compiled from now on use (null: none);
  // its records for other CPUs were already set aside (TuningLog::notes).
  void setTuningLog(std::shared_ptr<const TuningLog> log);
  std::shared_ptr<const TuningLog> tuningLog() const;

  // The on-disk cache directory ("" disables it). Defaults to $KILN_CACHE_DIR.
  void setDiskCacheDir(const std::string& dir);
  std::string diskCacheDir() const;

 private:
  friend class CompiledKernel;
  std::unique_ptr<DiskCache> disk_;
  std::shared_ptr<const TuningLog> tuning_;  // guarded by mu_
  std::atomic<size_t> diskHits_{0};
  mutable std::mutex diskMu_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> kernels_;
  std::atomic<size_t> hits_{0}, compiles_{0}, precompiledHits_{0}, codegens_{0};
  std::atomic<double> kernelMillis_{0};
};

}  // namespace kiln::jit
