// Products of few columns as inner products (jit/gemm_dot.cc) against the
// reference and against the panel kernels, on odd shapes, with every post-op.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "device/thread_pool.h"
#include "gemm_reference.h"
#include "jit/gemm.h"
#include "jit/gemm_internal.h"

using namespace kiln;

TEST_CASE("sgemm: few columns as inner products or as panels, packed or not, on odd shapes, against the reference") {
  std::mt19937 rng(59);
  std::uniform_real_distribution<float> d(-1, 1);
  int threadsBefore = device::numThreads();
  // Rows 1, 5 (a partial 4-row block), 17 and 64 (more than one task); columns 1
  // to 32 (partial 5-column blocks: 1, 2 and 4 left over); contractions 1, 17
  // and 129 (a masked last vector) and 300. A transposed A or a B not stored
  // transposed cannot be read as rows: those products take the panels whatever
  // the schedule says (`narrow=dot` is a preference where it applies).
  int cases = 0;
  for (int threads : {1, 2})
    for (int64_t m : {1, 5, 17, 64})
      for (int64_t n : {1, 2, 5, 9, 10, 12, 17, 32})
        for (int64_t k : {1, 17, 129, 300})
          for (auto [ta, tb] : {std::pair{false, true}, std::pair{true, true}, std::pair{false, false}}) {
            if (m * n * k > 200'000 || (threads == 2 && m < 17)) continue;
            device::setNumThreads(threads);
            ++cases;
            bool acc = cases % 3 == 0, relu = cases % 2 == 0, withBias = cases % 4 != 1;
            CAPTURE(threads);
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(acc);
            CAPTURE(relu);
            CAPTURE(withBias);
            std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n)),
                bias(static_cast<size_t>(n));
            for (float& v : a) v = d(rng);
            for (float& v : b) v = d(rng);
            for (float& v : c) v = d(rng);
            for (float& v : bias) v = d(rng);
            const std::vector<float> c0 = c;
            jit::GemmPost post{withBias ? bias.data() : nullptr, relu};
            auto check = [&](const char* path) {
              CAPTURE(path);
              test::checkGemm(c, c0, a, b, m, n, k, ta, tb, acc, post.bias, relu);
            };
            std::vector<float> packed(static_cast<size_t>(jit::packedBFloats(k, n)));
            jit::packGemmB(b.data(), tb ? k : n, tb, k, n, packed.data());
            for (int64_t narrow : {int64_t(0), jit::kGemmNarrowPanels, jit::kGemmNarrowDot}) {
              CAPTURE(narrow);
              jit::GemmBlocking blocking;
              blocking.narrow = narrow;
              c = c0;
              jit::sgemm(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, c.data(), n, acc, post, blocking);
              check("sgemm");
              c = c0;
              jit::sgemmPacked(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, packed.data(), c.data(), n, acc, post,
                               blocking);
              check("packed");
            }
          }
  CHECK(cases > 150);
  device::setNumThreads(threadsBefore);
}

TEST_CASE("inner products apply to a row-major A and a transposed B of few columns, and pay where they were measured to") {
  // Where they apply does not depend on the machine's measurements; whether the
  // machine has AVX-512 decides whether they apply at all.
  bool avx512 = __builtin_cpu_supports("avx512f");
  CHECK(jit::detail::dotProductsApply(10, false, true) == avx512);
  CHECK(jit::detail::dotProductsApply(jit::detail::kDotMostColumns, false, true) == avx512);
  CHECK_FALSE(jit::detail::dotProductsApply(jit::detail::kDotMostColumns + 1, false, true));
  CHECK_FALSE(jit::detail::dotProductsApply(10, true, true));
  CHECK_FALSE(jit::detail::dotProductsApply(10, false, false));
  // Classifier and regression heads take them; 16 columns fill the panels' lanes.
  CHECK(jit::detail::dotProductsPay(64, 10, 512));
  CHECK(jit::detail::dotProductsPay(64, 1, 16));
  CHECK(jit::detail::dotProductsPay(1, 12, 64));
  CHECK_FALSE(jit::detail::dotProductsPay(8, 12, 64));
  CHECK_FALSE(jit::detail::dotProductsPay(1, 16, 512));
}
