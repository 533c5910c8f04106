// The kernels' per-thread packing space (detail::scratch): it grows zeroed, so
// lanes a kernel computes and never stores read zeros or values kernels wrote,
// never old heap bytes (see scratch's comment: denormal garbage there made a
// two-thread convolution over 3x slower on Intel cores).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "jit/gemm_internal.h"

using namespace kiln;

TEST_CASE("scratch: a buffer grows zeroed, on every thread, even over freed memory full of denormal bit patterns") {
  // Denormal floats' bit patterns (small integers, as old pointers' high words
  // and counters leave them) in memory freed just before the scratch grows: the
  // allocator is likely to hand the same bytes back.
  constexpr size_t kFloats = 40'000;
  auto check = [] {
    for (size_t round = 0; round < 3; ++round) {
      size_t floats = kFloats << round;
      {
        auto* junk = new uint32_t[floats + 1024];
        for (size_t i = 0; i < floats + 1024; ++i) junk[i] = static_cast<uint32_t>(1 + i % 1000);
        float probe;
        std::memcpy(&probe, junk, sizeof probe);
        REQUIRE(std::fpclassify(probe) == FP_SUBNORMAL);
        delete[] junk;
      }
      float* s = jit::detail::scratch(3, floats);
      size_t nonzero = 0;
      for (size_t i = 0; i < floats; ++i) nonzero += s[i] != 0.0f;
      CHECK(nonzero == 0);
      for (size_t i = 0; i < floats; ++i) s[i] = 1.5f;  // a kernel's use, before the next growth
    }
  };
  // On fresh threads (as a new pool's workers are), whose scratch nothing has
  // grown yet: every round above is a growth. This thread's may have grown
  // past these sizes in an earlier test, and then holds what kernels wrote.
  std::thread(check).join();
  std::thread(check).join();
}
