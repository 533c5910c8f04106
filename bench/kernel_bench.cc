// Kernel throughput and JIT latency, each next to the machine limit measured in
// the same run: a fused element-wise chain against copy bandwidth, and the time
// from fused function to callable kernel.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/kernel.h"
#include "machine_limits.h"

using namespace kiln;

namespace {

jit::FusedFunction fused(const std::string& src, const std::string& name) {
  auto m = compiler::loadProgram(src, name + ".relay");
  return compiler::toFusedFunction(m->findFunction("main")->fn, name);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  double bw = bench::copyBandwidth();
  double peak = bench::fp32Peak();
  std::printf("machine: copy bandwidth %.1f GB/s (one thread), FP32 peak %.1f GFLOP/s (one core)\n\n", bw / 1e9,
              peak / 1e9);

  // Fused element-wise chain on 16M float32: reads x and y, writes one result.
  const int64_t n = int64_t(16) << 20;
  auto k = jit::KernelCache::global().get(
      fused("def @main(%x: Tensor[(?,), float32], %y: Tensor[(?,), float32]) { sigmoid(%x * %y + 1f) * %x - %y }", "chain"));
  Tensor x = Tensor::empty(DType::Float32, {n}), y = Tensor::empty(DType::Float32, {n});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-2, 2);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = d(rng), y.data<float>()[i] = d(rng);
  std::vector<Tensor> in{x, y};
  std::vector<Tensor> out{Tensor::empty(DType::Float32, {n})};
  k->run(in, out);
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    auto t0 = bench::Clock::now();
    k->run(in, out);
    best = std::min(best, bench::secondsSince(t0));
  }
  double bytes = 3.0 * static_cast<double>(n) * sizeof(float);
  std::printf("fused element-wise chain, 16M float32 (sigmoid(x*y+1)*x-y): %.2f ms, %.1f GB/s = %.2f of copy bandwidth\n",
              best * 1e3, bytes / best / 1e9, bytes / best / bw);

  // JIT latency: fused function to callable, for fresh element-wise kernels.
  std::vector<double> ms;
  for (int i = 0; i < 15; ++i) {
    std::string c = std::to_string(i + 2) + "f";
    auto f = fused("def @main(%x: Tensor[(?, 64), float32], %b: Tensor[(64,), float32]) { tanh(%x * " + c +
                       " + %b) * sigmoid(%x) }",
                   "lat" + std::to_string(i));
    auto t0 = bench::Clock::now();
    auto kk = jit::KernelCache::global().get(f);
    ms.push_back(bench::secondsSince(t0) * 1e3);
  }
  std::printf("JIT latency, element-wise kernel (IR to callable): median %.1f ms (target <= 15 ms)\n", median(ms));
  return 0;
}
