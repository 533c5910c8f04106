// The GEMM tests' reference: C as sgemm should have left it, in double precision.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kiln::test {

// C (m x n, ldc n) against the product of A and B as sgemm reads them (A k x m
// when ta, B n x k when tb), plus C's old value `c0` when `acc`, then bias[j]
// per column when `bias` is set and ReLU when `relu`.
inline void checkGemm(const std::vector<float>& c, const std::vector<float>& c0, const std::vector<float>& a,
                      const std::vector<float>& b, int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool acc,
                      const float* bias = nullptr, bool relu = false) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = acc ? c0[static_cast<size_t>(i * n + j)] : 0;
      for (int64_t p = 0; p < k; ++p)
        s += double(ta ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)]) *
             (tb ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)]);
      if (bias) s += bias[j];
      if (relu) s = std::max(s, 0.0);
      REQUIRE(c[static_cast<size_t>(i * n + j)] == doctest::Approx(s).epsilon(1e-4).scale(1.0));
    }
}

}  // namespace kiln::test
