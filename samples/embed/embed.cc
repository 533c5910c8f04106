// Embedding Kiln: load a compiled executable, make one VM per thread over it, and
// call a function with tensors. This is the pattern a serving binary copies.
// The VMs share one Runtime: each kernel compiles once for all of them.
//
//   kilnc samples/mlp.relay --params samples/mlp_weights.npz -o mlp.kx
//   kiln_embed mlp.kx
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln_embed EXECUTABLE\n");
    return 2;
  }
  try {
    // Load once (mapped, checksummed and verified); share it among all VMs.
    std::shared_ptr<const kiln::Executable> exe = kiln::Executable::load(argv[1]);

    // Requests run side by side, so each kernel runs on its request's thread: a
    // pool shared by four concurrent VMs would mostly run their loops inline
    // anyway (Runtime::stats().busyInline counts those).
    kiln::RuntimeOptions options;
    options.numThreads = 1;
    std::shared_ptr<kiln::Runtime> runtime = kiln::Runtime::create(options);
    kiln::VMOptions vmOptions;
    vmOptions.runtime = runtime;

    // Four threads, each with its own VM, each classifying its own input.
    std::vector<int> answers(4);
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w)
      workers.emplace_back([&, w] {
        kiln::VirtualMachine vm(exe, vmOptions);
        kiln::Tensor x = kiln::Tensor::empty(kiln::DType::Float32, {1, 784});
        for (int i = 0; i < 784; ++i) x.data<float>()[i] = std::sin(0.01f * static_cast<float>(i * (w + 1)));
        kiln::Value probs = vm.invoke("main", {kiln::Value(x)});
        const float* p = probs.tensor().data<float>();
        answers[w] = static_cast<int>(std::max_element(p, p + 10) - p);
      });
    for (auto& t : workers) t.join();
    for (int w = 0; w < 4; ++w) std::printf("input %d: class %d\n", w, answers[w]);
    std::printf("kernels compiled: %llu (for all four VMs)\n", static_cast<unsigned long long>(runtime->stats().kernelCompiles));
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
