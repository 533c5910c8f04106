// The ELF loader of CPU kernels (jit/object_loader.h): a real kernel object loads,
// and damaged ones are refused with kiln::Error, never a crash or a wild write.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "compiler/frontend.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/codegen_backend.h"
#include "jit/object_loader.h"
#include "kernel_ir/lower.h"
#include "kiln/error.h"

namespace {
std::string kernelObject(const std::string& symbol) {
  auto m = kiln::compiler::loadProgram(
      "def @main(%x: Tensor[(?, 37), float32]) { sum(tanh(%x) * 2f + exp(%x), axis=[1]) }", "loader.relay");
  auto f = kiln::compiler::toFusedFunction(m->findFunction("main")->fn, "loader");
  return kiln::jit::codegenBackend().compileCpu(kiln::kernel_ir::lowerToLoops(f), symbol, false).object;
}
}  // namespace

TEST_CASE("object loader: a kernel object loads - a missing entry point or a foreign file is refused") {
  std::string object = kernelObject("kiln_loader_test_a");
  CHECK(reinterpret_cast<void*>(kiln::jit::loadObjectUncached(object, "kiln_loader_test_a")) != nullptr);
  CHECK_THROWS_AS(kiln::jit::loadObjectUncached(object, "kiln_loader_test_b"), kiln::Error);
  CHECK_THROWS_AS(kiln::jit::loadObjectUncached("", "kiln_loader_test_a"), kiln::Error);
  CHECK_THROWS_AS(kiln::jit::loadObjectUncached("#!/bin/sh\necho not an object\n", "kiln_loader_test_a"), kiln::Error);
  // The process-wide table: loaded once, the same entry after.
  kiln::jit::KernelEntry e = kiln::jit::loadKernelObject(object, "kiln_loader_test_a");
  CHECK(reinterpret_cast<void*>(kiln::jit::loadKernelObject(object, "kiln_loader_test_a")) == reinterpret_cast<void*>(e));
  CHECK(reinterpret_cast<void*>(kiln::jit::loadedKernel("kiln_loader_test_a")) == reinterpret_cast<void*>(e));
  REQUIRE(kiln::jit::loadedKernelObject("kiln_loader_test_a") != nullptr);
  CHECK(*kiln::jit::loadedKernelObject("kiln_loader_test_a") == object);
}

TEST_CASE("object loader: truncated and mutated objects load or are refused, never crash") {
  std::string object = kernelObject("kiln_loader_test_m");
  int refused = 0, loaded = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      kiln::jit::loadObjectUncached(bytes, "kiln_loader_test_m");  // mapped, never run
      ++loaded;
    } catch (const kiln::Error&) {
      ++refused;
    }
  };
  for (size_t n = 0; n < object.size(); n += 97) attempt(object.substr(0, n));
  uint64_t state = 0x9e3779b97f4a7c15ull;  // SplitMix64: the same mutations every run
  auto next = [&] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (int i = 0; i < 1500; ++i) {
    std::string bad = object;
    int flips = 1 + static_cast<int>(next() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t at = next() % bad.size();
      // Headers and tables more often than code: they are what the loader reads.
      if (next() % 2) at = next() % std::min<size_t>(bad.size(), 128);
      bad[at] = static_cast<char>(next());
    }
    attempt(bad);
  }
  MESSAGE("mutated objects: " << refused << " refused, " << loaded << " loaded (not run)");
  CHECK(refused > 0);
  CHECK(refused + loaded == 1500 + static_cast<int>((object.size() + 96) / 97));
}
