// GPU throughput next to the GPU's limits measured in the same run: element-wise
// bandwidth against device-to-device copy bandwidth, float32 matmul 4096^3
// against an FMA loop's FP32 peak (no tensor cores), and the LSTM-over-a-list
// sample's latency on the GPU next to the CPU. Without a usable GPU it says why
// and exits 0 (CI has none).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/passes/to_fused_function.h"
#include "device/cuda_driver.h"
#include "device/cuda_stream.h"
#include "jit/kernel.h"
#include "kiln/compile.h"
#include "kiln/memory.h"
#include "kiln/vm.h"

using namespace kiln;

#if KILN_HAVE_CUDA_H

namespace {

const Device kGpu{Device::Kind::CUDA, 0};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds of `work` on the stream, by events, median of `runs`.
template <class F>
double gpuMillis(device::CudaStream& s, int runs, F&& work) {
  work();  // warm-up (and first-call compiles)
  s.synchronize();
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    s.timeBegin();
    work();
    s.timeEnd(0);
    s.synchronize();
    for (auto [id, ns] : s.drainTimings()) ms.push_back(static_cast<double>(ns) / 1e6);
  }
  return median(ms);
}

// A register-only FMA loop: kFmaChains independent chains per thread, unrolled
// kFmaUnroll times (kFmaChains * kFmaUnroll FMAs per trip).
constexpr int kFmaChains = 8, kFmaUnroll = 4;

std::string fmaPtx() {
  std::string body;
  for (int u = 0; u < kFmaUnroll; ++u)
    for (int c = 1; c <= kFmaChains; ++c)
      body += "  fma.rn.f32 %f" + std::to_string(c) + ", %f" + std::to_string(c) + ", 0f3F7FF000, 0f3A800000;\n";
  return R"(.version 7.8
.target sm_90
.address_size 64
.visible .entry fma_peak(.param .u64 out, .param .u32 iters) {
  .reg .f32 %f<10>;
  .reg .b32 %r<4>;
  .reg .pred %p;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %tid.x;
  cvt.rn.f32.u32 %f1, %r1;
  add.f32 %f2, %f1, 0f3F800000;
  add.f32 %f3, %f1, 0f40000000;
  add.f32 %f4, %f1, 0f40400000;
  add.f32 %f5, %f1, 0f40800000;
  add.f32 %f6, %f1, 0f40A00000;
  add.f32 %f7, %f1, 0f40C00000;
  add.f32 %f8, %f1, 0f40E00000;
  ld.param.u32 %r2, [iters];
  mov.u32 %r3, 0;
LOOP:
)" + body + R"(  add.u32 %r3, %r3, 1;
  setp.lt.u32 %p, %r3, %r2;
  @%p bra LOOP;
  add.f32 %f1, %f1, %f2;
  add.f32 %f3, %f3, %f4;
  add.f32 %f5, %f5, %f6;
  add.f32 %f7, %f7, %f8;
  add.f32 %f1, %f1, %f3;
  add.f32 %f5, %f5, %f7;
  add.f32 %f1, %f1, %f5;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r1, 4;
  add.u64 %rd2, %rd2, %rd3;
  st.global.f32 [%rd2], %f1;
  ret;
}
)";
}

kernel_ir::FusedFunction fused(const std::string& src, const std::string& name) {
  auto m = compiler::loadProgram(src, name + ".relay");
  return compiler::toFusedFunction(m->findFunction("main")->fn, name);
}

int run() {
  std::string why = device::cudaUnavailableReason();
  if (!why.empty()) {
    std::printf("gpu_bench: skipped: %s\n", why.c_str());
    return 0;
  }
  const device::CudaDriver& d = device::CudaDriver::get(kGpu);
  device::CudaDeviceInfo info = device::cudaDeviceInfo(kGpu);
  std::printf("GPU: %s, sm_%d, %d SMs, %.1f GiB\n", info.name.c_str(), info.computeCapability, info.multiprocessors,
              static_cast<double>(info.totalBytes) / (1u << 30));
  device::CudaStream stream(kGpu);
  device::CudaStreamScope scope(&stream);
  auto cu = [&] { return static_cast<CUstream>(stream.handle()); };

  // ---- limits ----
  constexpr int64_t kCopyElems = int64_t(64) << 20;  // 256 MiB of float32 each way
  Tensor a = Tensor::empty(DType::Float32, {kCopyElems}, kGpu), b = Tensor::empty(DType::Float32, {kCopyElems}, kGpu);
  auto ptr = [](const Tensor& t) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(t.data())); };
  double copyMs = gpuMillis(stream, 10, [&] { d.check(d.memcpyDtoDAsync(ptr(b), ptr(a), a.nbytes(), cu()), "copy"); });
  double copyBw = 2.0 * static_cast<double>(a.nbytes()) / (copyMs * 1e-3) / 1e9;

  CUmodule fmaModule;
  std::string ptxText = fmaPtx();
  d.check(d.moduleLoadDataEx(&fmaModule, ptxText.c_str(), 0, nullptr, nullptr), "loading the FMA loop");
  CUfunction fmaFn;
  d.check(d.moduleGetFunction(&fmaFn, fmaModule, "fma_peak"), "fma_peak");
  uint32_t blocks = static_cast<uint32_t>(info.multiprocessors) * 8, threads = 256, iters = 4096;
  Tensor sink = Tensor::empty(DType::Float32, {int64_t(blocks) * threads}, kGpu);
  CUdeviceptr sinkPtr = ptr(sink);
  void* params[] = {&sinkPtr, &iters};
  double fmaMs = gpuMillis(stream, 5, [&] {
    d.check(d.launchKernel(fmaFn, blocks, 1, 1, threads, 1, 1, 0, cu(), params, nullptr), "fma_peak");
  });
  double peak = double(blocks) * threads * iters * kFmaChains * kFmaUnroll * 2 / (fmaMs * 1e-3) / 1e9;
  std::printf("limits: device-to-device copy %.0f GB/s; FP32 FMA peak %.1f TFLOP/s\n", copyBw, peak / 1e3);

  // ---- element-wise: a fused chain, one read and one write per element ----
  {
    auto f = fused("def @main(%x: Tensor[(67108864), float32]) { nn.relu(%x * 2f + 1f) }", "elementwise");
    auto k = jit::KernelCache::global().get(f, kGpu);
    Tensor out = Tensor::empty(DType::Float32, {kCopyElems}, kGpu);
    std::vector<Tensor> in{a}, outs{out};
    double ms = gpuMillis(stream, 10, [&] { k->run(in, outs); });
    double bw = 2.0 * static_cast<double>(a.nbytes()) / (ms * 1e-3) / 1e9;
    std::printf("element-wise chain, 64M float32: %.3f ms, %.0f GB/s = %.2f of copy bandwidth (target >= 0.7)\n", ms, bw,
                bw / copyBw);
  }
  // ---- matmul 4096^3 float32 ----
  {
    constexpr int64_t n = 4096;
    auto f = fused("def @main(%x: Tensor[(4096, 4096), float32], %w: Tensor[(4096, 4096), float32]) { nn.matmul(%x, %w) }",
                   "matmul");
    auto k = jit::KernelCache::global().get(f, kGpu);
    Tensor x = Tensor::empty(DType::Float32, {n, n}, kGpu), w = Tensor::empty(DType::Float32, {n, n}, kGpu),
           c = Tensor::empty(DType::Float32, {n, n}, kGpu);
    std::vector<Tensor> in{x, w}, outs{c};
    double ms = gpuMillis(stream, 5, [&] { k->run(in, outs); });
    double flops = 2.0 * n * n * n / (ms * 1e-3) / 1e9;
    std::printf("matmul 4096^3 float32: %.2f ms, %.1f TFLOP/s = %.2f of FP32 peak (target >= 0.4)\n", ms, flops / 1e3,
                flops / peak);
  }
  // ---- the LSTM sample, GPU next to CPU ----
  for (const char* device : {"cpu", "cuda"}) {
    CompileOptions o;
    o.devices = {Device::parse(device)};
    auto exe = compileFile(KILN_SOURCE_DIR "/samples/lstm_list.relay", o);
    VirtualMachine vm(exe);
    std::vector<Value> args;
    for (const TypeDesc& t : exe->findFunction("main")->paramTypes) {
      Tensor h = Tensor::empty(t.dtype, t.shape);
      for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = 0.01f * static_cast<float>(i % 7);
      args.emplace_back(h);
    }
    for (int w = 0; w < 3; ++w) vm.invoke("main", args);
    std::vector<double> us;
    for (int r = 0; r < 50; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      vm.invoke("main", args);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("lstm_list sample on %s: median %.1f us per call\n", device, median(us));
  }
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
}

#else

int main() {
  std::printf("gpu_bench: skipped: %s\n", device::cudaUnavailableReason().c_str());
  return 0;
}

#endif
