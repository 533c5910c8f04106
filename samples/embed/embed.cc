// Embedding Kiln: load a compiled executable, make one VM per thread over it, and
// call a function with tensors. This is the pattern a serving binary copies.
// The VMs share one Runtime: each kernel compiles once for all of them.
//
// It expects the sample MLP (samples/mlp.relay: main(%x: Tensor[(1, 784), float32])
// returning 10 class probabilities):
//
//   kilnc samples/mlp.relay --params samples/mlp_weights.npz -o mlp.kx
//   kiln_embed mlp.kx
//
// Every failure (an unreadable or corrupt file, an executable that takes other
// inputs, an error inside a worker thread) is printed and the program exits 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

namespace {
constexpr int kWorkers = 4;
constexpr int kFeatures = 784, kClasses = 10;

// The class with the highest probability; throws when the result is not the MLP's.
int classify(kiln::VirtualMachine& vm, int worker) {
  kiln::Tensor x = kiln::Tensor::empty(kiln::DType::Float32, {1, kFeatures});
  for (int i = 0; i < kFeatures; ++i) x.data<float>()[i] = std::sin(0.01f * static_cast<float>(i * (worker + 1)));
  // invoke() checks the arguments against main's parameter types: another
  // executable fails here with a kiln::Error naming the parameter.
  kiln::Value result = vm.invoke("main", {kiln::Value(x)});
  if (!result.isTensor() || result.tensor().dtype() != kiln::DType::Float32 || result.tensor().numel() != kClasses)
    throw kiln::Error("main returned " + result.describe() + ", not 10 float32 class probabilities");
  kiln::Tensor probs = result.tensor();
  const float* p = probs.data<float>();
  return static_cast<int>(std::max_element(p, p + kClasses) - p);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: kiln_embed EXECUTABLE\n"
                 "  EXECUTABLE: the sample MLP compiled by\n"
                 "  kilnc samples/mlp.relay --params samples/mlp_weights.npz -o mlp.kx\n");
    return 2;
  }
  try {
    // Load once (mapped, checksummed and verified); share it among all VMs.
    std::shared_ptr<const kiln::Executable> exe = kiln::Executable::load(argv[1]);
    if (!exe->findFunction("main")) throw kiln::Error(std::string(argv[1]) + " has no function main");

    // Requests run side by side, so each kernel runs on its request's thread: a
    // pool shared by four concurrent VMs would mostly run their loops inline
    // anyway (Runtime::stats().busyInline counts those).
    kiln::RuntimeOptions options;
    options.numThreads = 1;
    std::shared_ptr<kiln::Runtime> runtime = kiln::Runtime::create(options);
    kiln::VMOptions vmOptions;
    vmOptions.runtime = runtime;

    // Four threads, each with its own VM, each classifying its own input. An
    // exception must not leave a thread (that would terminate the process): each
    // worker keeps its own, and main reports them after joining.
    std::vector<int> answers(kWorkers);
    std::vector<std::exception_ptr> failures(kWorkers);
    std::vector<std::thread> workers;
    for (int w = 0; w < kWorkers; ++w)
      workers.emplace_back([&, w] {
        try {
          kiln::VirtualMachine vm(exe, vmOptions);
          answers[w] = classify(vm, w);
        } catch (...) {
          failures[w] = std::current_exception();
        }
      });
    for (auto& t : workers) t.join();
    for (int w = 0; w < kWorkers; ++w)
      if (failures[w]) std::rethrow_exception(failures[w]);
    for (int w = 0; w < kWorkers; ++w) std::printf("input %d: class %d\n", w, answers[w]);
    std::printf("kernels compiled: %llu (for all four VMs)\n", static_cast<unsigned long long>(runtime->stats().kernelCompiles));
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln_embed: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_embed: error: %s\n", e.what());
    return 1;
  }
}
