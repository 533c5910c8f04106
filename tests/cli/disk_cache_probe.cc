// Compiles and runs three kernels with the disk cache in $KILN_CACHE_DIR, printing
// for each whether it came from the disk and a checksum of its result; the test
// script runs it twice and expects the second run to take every kernel from disk.
#include <chrono>
#include <cstdio>

#include "compiler/frontend.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/kernel.h"

int main() {
  const char* programs[] = {
      "def @main(%x: Tensor[(?, 64), float32]) { tanh(%x * 2f + 1f) }",
      "def @main(%x: Tensor[(?, 64), float32]) { nn.softmax(%x) }",
      "def @main(%x: Tensor[(?, 64), float32]) { sum(exp(%x), axis=[1]) }",
  };
  for (const char* src : programs) {
    auto m = kiln::compiler::loadProgram(src, "probe.relay");
    auto f = kiln::compiler::toFusedFunction(m->findFunction("main")->fn, "probe");
    auto t0 = std::chrono::steady_clock::now();
    auto k = kiln::jit::KernelCache::global().get(f);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    kiln::Tensor x = kiln::Tensor::empty(kiln::DType::Float32, {3, 64});
    for (int i = 0; i < 192; ++i) x.data<float>()[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
    std::vector<kiln::Tensor> in{x};
    auto out = (*k)(in);
    double sum = 0;
    for (int64_t i = 0; i < out[0].numel(); ++i) sum += out[0].data<float>()[i];
    std::printf("%s %.6f %.3f\n", k->fromDiskCache() ? "disk" : "compiled", sum, ms);
  }
  return 0;
}
