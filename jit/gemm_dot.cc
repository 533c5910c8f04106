// Products of few columns as inner products: C[i][j] = A row i . B row j, for a
// row-major A and a B stored transposed (n x k: a dense layer's weight), each
// element a dot product along k with vector FMAs, reduced across lanes at the end.
//
// Why: the panel kernels (gemm.cc) lay B out in 32- or 16-column panels and
// broadcast A across them, so a product of n columns uses n of every 16 lanes of
// each FMA: a 10-unit classifier head computes 16 columns to keep 10, a
// regression head's single column 16 to keep 1. Along k every lane is useful
// whatever n is. A 4 x 5 block of C (twenty accumulators) loads four vectors of
// A and five of B for twenty FMAs, so the block runs at the FMA rate; the
// reductions cost one lane-sum per element, which long rows amortize. Measured on
// this AVX-512 Zen 5 against the panel kernels with B prepacked: 64 x 512 by 10
// columns 5.55 -> 2.98 us, 1 x 512 by 10 176 -> 102 ns, 64 x 512 by 1 5.5 ->
// 1.1 us; at 12 columns, 8 or 64 rows and a contraction of 64 the panels win
// (0.8x), and past 16 columns they do. dotProductsPay encodes where this
// machine's measurements crossed; a schedule (GemmBlocking::narrow) may choose
// either way.
#include <immintrin.h>

#include <algorithm>

#include "device/thread_pool.h"
#include "jit/gemm.h"
#include "jit/gemm_internal.h"
#include "kernel_ir/schedule.h"

namespace kiln::jit::detail {

namespace {

static_assert(kDotMostColumns == loop::kNarrowGemmMostColumns, "the schedule offers narrow= where this path applies");

constexpr int kBlockRows = 4;     // rows of A a block reads
constexpr int kBlockColumns = 5;  // rows of B (columns of C) a block reads
constexpr int64_t kRowsPerTask = 16;

struct DotJob {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;
  GemmPost post;
};

// The sum of a vector's lanes, in 512-bit registers throughout: GCC 12's
// _mm512_reduce_add_ps, 256-bit extracts and unmasked shuffles pass an undefined
// vector, which -Werror's -Wuninitialized refuses; the zero-masked forms do not.
__attribute__((target("avx512f"), always_inline)) inline float laneSum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xFFFF, v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xFFFF, v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_add_ps(v, _mm512_maskz_permute_ps(0xFFFF, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_maskz_permute_ps(0xFFFF, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(v);
}

// One vector step of the contraction, at depth p, for an R x C block; lanes
// outside `mask` read nothing and add zero.
template <int R, int C>
__attribute__((target("avx512f"), always_inline)) inline void dotStep(__m512 (&acc)[R][C], const float* a, int64_t lda,
                                                                      const float* b, int64_t ldb, int64_t p, __mmask16 mask) {
  __m512 av[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) av[i] = _mm512_maskz_loadu_ps(mask, a + i * lda + p);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    __m512 bv = _mm512_maskz_loadu_ps(mask, b + c * ldb + p);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i][c] = _mm512_fmadd_ps(av[i], bv, acc[i][c]);
  }
}

// An R x C block of C from rows i0.. of A and rows j0.. of B. The contraction's
// last partial vector is read with a mask (never past a row's end).
template <int R, int C>
__attribute__((target("avx512f"))) void dotBlock(const DotJob& j, int64_t i0, int64_t j0) {
  const float* a = j.a + i0 * j.lda;
  const float* b = j.b + j0 * j.ldb;
  const int64_t lda = j.lda, ldb = j.ldb, k = j.k;
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (auto& row : acc)
#pragma GCC unroll 8
    for (auto& v : row) v = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) dotStep<R, C>(acc, a, lda, b, ldb, p, 0xFFFF);
  if (p < k) dotStep<R, C>(acc, a, lda, b, ldb, p, static_cast<__mmask16>((1u << (k - p)) - 1));
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* out = j.c + (i0 + i) * j.ldc + j0;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      float v = laneSum(acc[i][c]);
      if (j.accumulate) v += out[c];
      if (j.post.bias) v += j.post.bias[j0 + c];
      if (j.post.relu && v <= 0.0f) v = 0.0f;  // as nn.relu: NaN stays
      out[c] = v;
    }
  }
}

using BlockFn = void (*)(const DotJob&, int64_t, int64_t);
template <int R>
constexpr BlockFn kByColumns[] = {dotBlock<R, 1>, dotBlock<R, 2>, dotBlock<R, 3>, dotBlock<R, 4>, dotBlock<R, 5>};
constexpr const BlockFn* kByRows[] = {kByColumns<1>, kByColumns<2>, kByColumns<3>, kByColumns<4>};
static_assert(kBlockRows == 4 && kBlockColumns == 5);

// Rows [begin, end) x kRowsPerTask of C.
void dotTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const DotJob& j = *reinterpret_cast<const DotJob*>(ctx);
  for (int64_t i = begin * kRowsPerTask, last = std::min(j.m, end * kRowsPerTask); i < last; i += kBlockRows) {
    const BlockFn* byColumns = kByRows[std::min<int64_t>(kBlockRows, last - i) - 1];
    for (int64_t c = 0; c < j.n; c += kBlockColumns) byColumns[std::min<int64_t>(kBlockColumns, j.n - c) - 1](j, i, c);
  }
}

bool hasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

bool dotProductsApply(int64_t n, bool transA, bool transB) {
  return !transA && transB && n <= kDotMostColumns && hasAvx512();
}

bool dotProductsPay(int64_t m, int64_t n, int64_t k) {
  return n <= 8 || (n <= 12 && (k >= 128 || m == 1));
}

void dotGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
             bool accumulate, const GemmPost& post) {
  DotJob job{m, n, k, a, lda, b, ldb, c, ldc, accumulate, post};
  int64_t tasks = (m + kRowsPerTask - 1) / kRowsPerTask;
  device::parallelFor(tasks, m * n * k / 4, dotTask, reinterpret_cast<void* const*>(&job), nullptr);
}

}  // namespace kiln::jit::detail
