// A kernel loaded into the CUDA driver: its PTX module, one function per
// launch, and the host plan (gpu_plan.h) that run() walks to launch them.
//
// Ownership: the module stays loaded for the life of the process (compiled
// kernels are cached process-wide, like the CPU's machine code). Immutable after
// construction; run() may be called from many threads, each on its own stream.
#pragma once

#include <cstdint>
#include <vector>

#include "device/cuda_emu_driver.h"
#include "device/cuda_stream.h"
#include "jit/gpu_plan.h"
#include "jit/object_loader.h"

namespace kiln::jit {

class GpuKernel {
 public:
  // Loads `ptx.ptx` on `device` (cuModuleLoadDataEx); throws kiln::Error with
  // the driver's log when it refuses. On the emulated device the module is
  // `emulated`, the host object's dispatcher for the plan's entries, instead.
  GpuKernel(loop::LoopKernel loops, PtxModule ptx, Device device, KernelEntry emulated = nullptr);
  const PtxModule& module() const { return ptx_; }

  // Queues the launches on `stream`. `buffers` are device pointers in the
  // kernel's buffer order; `shapes` the run-time shape array (host memory).
  void run(void* const* buffers, const int64_t* shapes, size_t numShapes, device::CudaStream& stream) const;

 private:
  loop::LoopKernel loops_;  // for the extents the host computes
  PtxModule ptx_;
  Device device_;
  std::vector<void*> functions_;  // CUfunction per launch
  std::vector<void*> skinnyFunctions_;  // per launch: a Gemm's skinny entry (gpu_plan.h), else null
  device::EmulatedModuleImage emulatedImage_;
  int multiprocessors_ = 1;
};

}  // namespace kiln::jit
