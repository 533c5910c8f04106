// Loading PTX into the driver and walking a kernel's launch plan on a stream.
#include "jit/cuda_kernel.h"

#include <algorithm>
#include <unordered_map>

#include "device/cuda_driver.h"
#include "kiln/error.h"

namespace kiln::jit {

using device::CudaDriver;
using device::CudaStream;
using device::cudaDeviceInfo;


#if KILN_HAVE_CUDA_H

GpuKernel::GpuKernel(loop::LoopKernel loops, PtxModule ptx, Device device, KernelEntry emulated)
    : loops_(std::move(loops)), ptx_(std::move(ptx)), device_(device) {
  const CudaDriver& d = CudaDriver::get(device);
  d.use(device.index);
  const void* image = ptx_.ptx.c_str();
  if (d.emulated) {
    if (!emulated) throw Error("internal: kernel " + loops_.name + " has no host code for the emulated device");
    emulatedImage_.dispatch = emulated;
    emulatedImage_.entries = entryPoints(ptx_);
    emulatedImage_.kernel = loops_.name;
    image = &emulatedImage_;
  }
  multiprocessors_ = std::max(1, cudaDeviceInfo(device).multiprocessors);
  char log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log - 1))};
  CUmodule module = nullptr;
  CUresult r = d.moduleLoadDataEx(&module, image, 2, options, values);
  if (r != CUDA_SUCCESS) {
    const char* msg = nullptr;
    d.getErrorString(r, &msg);
    throw Error("kernel " + loops_.name + ": the CUDA driver refused its PTX (" + (msg ? msg : "unknown error") + ")" +
                (log[0] ? std::string(": ") + log : std::string()));
  }
  for (const PtxLaunch& l : ptx_.launches) {
    CUfunction f = nullptr, skinny = nullptr;
    d.check(d.moduleGetFunction(&f, module, l.entry.c_str()), "cuModuleGetFunction");
    if (l.mapping == GpuMapping::Gemm) d.check(d.moduleGetFunction(&skinny, module, skinnyEntry(l).c_str()), "cuModuleGetFunction");
    functions_.push_back(f);
    skinnyFunctions_.push_back(skinny);
  }
}

namespace {

uint32_t ceilDiv(int64_t a, int64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

}  // namespace

void GpuKernel::run(void* const* buffers, const int64_t* shapes, size_t numShapes, CudaStream& stream) const {
  const CudaDriver& d = CudaDriver::get(device_);
  d.use(device_.index);
  std::unordered_map<int32_t, int64_t> vars;
  // The shape array travels by value: at least one slot, as the entry declares.
  std::vector<int64_t> shapeArg(std::max<size_t>(numShapes, 1), 0);
  std::copy(shapes, shapes + numShapes, shapeArg.begin());
  size_t numBuffers = loops_.buffers.size();
  std::vector<CUdeviceptr> pointers(numBuffers);
  for (size_t i = 0; i < numBuffers; ++i) pointers[i] = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(buffers[i]));
  std::vector<int64_t> hostVarValues(ptx_.hostVars.size());
  std::vector<void*> params;
  for (auto& p : pointers) params.push_back(&p);
  params.push_back(shapeArg.data());
  for (auto& v : hostVarValues) params.push_back(&v);

  auto eval = [&](loop::ExprId e, const char* what) -> int64_t {
    auto v = loop::evalOnHost(loops_, e, shapes, vars);
    if (!v) throw Error("internal: kernel " + loops_.name + ": the host cannot compute " + what);
    return *v;
  };
  // Blocks for a grid-stride launch over `work` items (unknown: -1).
  auto blocksFor = [&](int64_t work, int64_t perBlock) -> uint32_t {
    int64_t cap = static_cast<int64_t>(multiprocessors_) * 32;
    if (work < 0) return static_cast<uint32_t>(multiprocessors_ * 8);
    return static_cast<uint32_t>(std::min<int64_t>(ceilDiv(work, perBlock), cap));
  };
  auto launch = [&](const PtxLaunch& l, size_t index) {
    uint32_t gx = 1, gy = 1, gz = 1;
    void* function = functions_[index];
    switch (l.mapping) {
      case GpuMapping::Flat:
      case GpuMapping::Rows: {
        int64_t work = 1;
        for (loop::ExprId e : l.extents) {
          auto v = loop::evalOnHost(loops_, e, shapes, vars);
          if (!v) {
            work = -1;
            break;
          }
          work *= *v;
        }
        if (work == 0) return;
        gx = blocksFor(work, l.mapping == GpuMapping::Rows ? 1 : l.blockThreads);
        break;
      }
      case GpuMapping::Gemm: {
        const loop::GemmArgs& g = loops_.stmt(l.stmt).gemm;
        int64_t m = eval(g.m, "a matrix product's rows"), n = eval(g.n, "a matrix product's columns");
        int64_t batch = l.batch >= 0 ? eval(l.batch, "a batch") : 1;
        if (m == 0 || n == 0 || batch == 0) return;
        if (batch > 65535 || ceilDiv(m, 128) > 65535)
          throw Error("kernel " + loops_.name + ": a matrix product of " + std::to_string(batch) + " x " + std::to_string(m) +
                      " rows is larger than one GPU launch covers");
        gz = static_cast<uint32_t>(batch);
        if (m <= kGpuSkinnyRows) {
          function = skinnyFunctions_[index];
          gx = blocksFor(n, kGpuSkinnyColumnsPerBlock);  // a warp per column, grid-stride
          break;
        }
        gx = ceilDiv(n, 128);
        gy = ceilDiv(m, 128);
        break;
      }
      case GpuMapping::Single: break;
    }
    for (size_t i = 0; i < ptx_.hostVars.size(); ++i) {
      auto it = vars.find(ptx_.hostVars[i]);
      hostVarValues[i] = it == vars.end() ? 0 : it->second;
    }
    d.check(d.launchKernel(static_cast<CUfunction>(function), gx, gy, gz, l.blockThreads, 1, 1, 0,
                           static_cast<CUstream>(stream.handle()), params.data(), nullptr),
            "cuLaunchKernel");
  };
  // The plan, iteratively: a stack of (steps, position) frames; host loops
  // re-enter their body once per iteration.
  struct Frame {
    const std::vector<PtxStep>* steps;
    size_t next;
    const PtxStep* loop;  // the Loop step whose body this is, or null
    int64_t iteration, extent;
  };
  std::vector<Frame> stack{{&ptx_.steps, 0, nullptr, 0, 0}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next == f.steps->size()) {
      if (f.loop && ++f.iteration < f.extent) {
        vars[f.loop->var] = f.iteration;
        f.next = 0;
        continue;
      }
      if (f.loop) vars.erase(f.loop->var);
      stack.pop_back();
      continue;
    }
    const PtxStep& s = (*f.steps)[f.next++];
    switch (s.kind) {
      case PtxStep::Kind::Launch:
        launch(ptx_.launches[static_cast<size_t>(s.launch)], static_cast<size_t>(s.launch));
        break;
      case PtxStep::Kind::If:
        stack.push_back({eval(s.expr, "a branch on shapes") ? &s.body : &s.orElse, 0, nullptr, 0, 0});
        break;
      case PtxStep::Kind::Loop: {
        int64_t extent = eval(s.expr, "a loop's extent");
        if (extent <= 0) break;
        vars[s.var] = 0;
        stack.push_back({&s.body, 0, &s, 0, extent});
        break;
      }
    }
  }
}

#else

GpuKernel::GpuKernel(loop::LoopKernel loops, PtxModule ptx, Device device, KernelEntry)
    : loops_(std::move(loops)), ptx_(std::move(ptx)), device_(device) {
  throw Error(cudaUnavailableReason(device));
}
void GpuKernel::run(void* const*, const int64_t*, size_t, CudaStream&) const {}

#endif

}  // namespace kiln::jit
