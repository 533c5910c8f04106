// The GEMM's few-row and few-column products: batch-1 layers, LSTM steps and
// tree nodes stream each panel of B once with vector FMAs (gemm.h, kSkinnyRows);
// a classifier head's few columns run the same panel kernel over 8 rows at a time.
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "device/thread_pool.h"
#include "jit/gemm.h"
#include "jit/gemm_internal.h"
#include "jit/host_cpu.h"

namespace kiln::jit {

using device::parallelFor;

using namespace detail;

namespace {

// Sixteen floats of a panel row. A prepacked panel is zero-padded to its full
// width, so it is read whole; B in place is read masked, so nothing past column
// n is touched. A masked load costs more than a plain one: a 1 x 128 by 128 x 64
// product held in L1 took 129 ns with masked loads, 116-119 ns with plain ones.
template <bool Whole>
__attribute__((target("avx512f"), always_inline)) inline __m512 panelLoad512(const float* r, __mmask16 mask) {
  if constexpr (Whole) return _mm512_loadu_ps(r);
  else return _mm512_maskz_loadu_ps(mask, r);
}

// The contraction steps [0, kc) of one panel: B's rows from `row`, `stride`
// apart, A's values at ap[i * aRow + p * aCol]; step p goes to accumulator set
// p % kSets. Running pointers with the strides in locals: indexing by
// (p + s) * stride from the job each step cost an integer multiply and a reload
// per FMA (a 1 x 512 by 512 x 10 product spent more on addresses than on FMAs).
// `Contiguous` (a prepacked panel, A row-major) makes both strides constants,
// so every address is a register plus an offset. `Prefetch` (contiguous only)
// asks for the panel's lines kPrefetchFloats ahead of the reads: see farStream.
constexpr int64_t kPrefetchFloats = 256;
// Accumulator sets of one whole row (skinnyPanel512<1, false>, skinnyFourPanels512).
constexpr int kFourPanelSets = 2;
// Floats of A that runPanels asks for ahead of the steps: 16 KB, a third of this
// project's Xeon's L1.
constexpr int64_t kPrefetchAFloats = 4096;
template <int M, bool Half, int kSets, bool Contiguous, bool Prefetch = false>
__attribute__((target("avx512f,fma"), always_inline)) inline void skinnySteps512(__m512 (&acc)[kSets][M][2], const float* row,
                                                                                int64_t stride, const float* ap, int64_t aRow,
                                                                                int64_t aCol, int64_t kc, __mmask16 m0,
                                                                                __mmask16 m1) {
  static_assert(Contiguous || !Prefetch);
  if constexpr (Contiguous) {
    stride = 32;
    aCol = 1;
  }
  int64_t p = 0;
  if constexpr (Contiguous && M == 1) {
    // One row: sixteen steps from one load of A, each step's value broadcast
    // in registers (vpermps from hoisted indices). A broadcast from memory per
    // step made three loads per 128 bytes of B: a 512 KB panel set held in L2
    // took 1.20-1.25x the time of a plain read loop over it, now 1.08-1.12x
    // (a Sapphire Rapids-class Xeon, 2 MiB L2).
    for (; p + 16 <= kc; p += 16, row += 16 * 32, ap += 16) {
      __m512 av = _mm512_loadu_ps(ap);
#pragma GCC unroll 16
      for (int s = 0; s < 16; ++s) {
        const float* r = row + s * 32;
        if constexpr (Prefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(r + kPrefetchFloats), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(r + kPrefetchFloats + 16), _MM_HINT_T0);
        }
        // Zero-masked with every lane set: the plain intrinsic's undefined source
        // trips GCC 12's -Wmaybe-uninitialized; the instruction is the same.
        __m512 x = _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_set1_epi32(s), av);
        __m512 b0 = panelLoad512<true>(r, m0);
        acc[s % kSets][0][0] = _mm512_fmadd_ps(x, b0, acc[s % kSets][0][0]);
        if constexpr (!Half) acc[s % kSets][0][1] = _mm512_fmadd_ps(x, panelLoad512<true>(r + 16, m1), acc[s % kSets][0][1]);
      }
    }
  }
  for (; p + kSets <= kc; p += kSets, row += kSets * stride, ap += kSets * aCol) {
    if constexpr (Prefetch)
#pragma GCC unroll 16
      for (int l = 0; l < 2 * kSets; ++l)  // the 64-byte lines of kSets rows of 32 floats
        _mm_prefetch(reinterpret_cast<const char*>(row + kPrefetchFloats + 16 * l), _MM_HINT_T0);  // never faults
#pragma GCC unroll 8
    for (int s = 0; s < kSets; ++s) {
      const float* r = row + s * stride;
      __m512 b0 = panelLoad512<Contiguous>(r, m0), b1 = Half ? b0 : panelLoad512<Contiguous>(r + 16, m1);
      // In registers, loaded once for all M rows: GCC otherwise folds the load
      // into each row's FMA, M loads of the same 64 bytes, and two rows made
      // six loads a step where the FMAs need two cycles (a 2 x 256 by 256 x 128
      // product took 1.9 us, against 1.1 for one row).
      if constexpr (M > 1) asm("" : "+v"(b0), "+v"(b1));
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        __m512 x = _mm512_set1_ps(ap[i * aRow + s * aCol]);
        acc[s][i][0] = _mm512_fmadd_ps(x, b0, acc[s][i][0]);
        if constexpr (!Half) acc[s][i][1] = _mm512_fmadd_ps(x, b1, acc[s][i][1]);
      }
    }
  }
  for (; p < kc; ++p, row += stride, ap += aCol) {
    __m512 b0 = panelLoad512<Contiguous>(row, m0), b1 = Half ? b0 : panelLoad512<Contiguous>(row + 16, m1);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      __m512 x = _mm512_set1_ps(ap[i * aRow]);
      acc[0][i][0] = _mm512_fmadd_ps(x, b0, acc[0][i][0]);
      if constexpr (!Half) acc[0][i][1] = _mm512_fmadd_ps(x, b1, acc[0][i][1]);
    }
  }
}

// Accumulators [.][i] summed over the sets, in set order (the order both
// one-row kernels keep, so that a panel's result has the same bits from either).
template <bool Half, int kSets, int R>
__attribute__((target("avx512f"), always_inline)) inline void sumSets512(const __m512 (&acc)[kSets][R][2], int i, __m512& v0,
                                                                        __m512& v1) {
  v0 = acc[0][i][0];
  v1 = acc[0][i][1];
#pragma GCC unroll 8
  for (int s = 1; s < kSets; ++s) {
    v0 = _mm512_add_ps(v0, acc[s][i][0]);
    if constexpr (!Half) v1 = _mm512_add_ps(v1, acc[s][i][1]);
  }
}

// Row i of panel q's results from the registers: plus what C holds when
// accumulating, plus the bias, then ReLU (v <= 0 becomes +0, NaN stays), stored
// masked to the panel's valid columns (a half panel has no second vector).
template <bool Half>
__attribute__((target("avx512f"), always_inline)) inline void storePanelRow512(const SkinnyJob& j, int64_t i, int64_t q,
                                                                              __m512 v0, __m512 v1, __mmask16 m0,
                                                                              __mmask16 m1) {
  float* out = j.c + i * j.ldc + q * 32;
  if (j.accumulate) {
    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, out));
    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, out + 16));
  }
  if (j.post.bias) {
    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, j.post.bias + q * 32));
    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, j.post.bias + q * 32 + 16));
  }
  if (j.post.relu) {
    __m512 zero = _mm512_setzero_ps();
    v0 = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v0, zero, _CMP_LE_OQ), v0, zero);
    v1 = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v1, zero, _CMP_LE_OQ), v1, zero);
  }
  _mm512_mask_storeu_ps(out, m0, v0);
  if constexpr (!Half) _mm512_mask_storeu_ps(out + 16, m1, v1);
}

// One 32-column panel for M rows. Accumulator sets take turns at the steps of
// the contraction, so that consecutive FMAs into one accumulator do not wait on
// each other's latency: eight independent chains at least where the rows allow
// (a half panel of one row had two, and a 1 x 512 by 512 x 10 classifier head
// waited 4 cycles an FMA: 0.32 us for 20 KB of weights).
template <int M, bool Half>
__attribute__((target("avx512f,fma"))) void skinnyPanel512(const SkinnyJob& j, int64_t q, bool prefetch) {
  constexpr int kChains = M * (Half ? 1 : 2);
  // One whole row: two sets, as skinnyFourPanels512 has, so that a panel's
  // columns are summed in the same order by either kernel (a result never
  // depends on how the panels were grouped: by thread count or by part). Four
  // chains were as fast as eight from L2 (1.09 against 1.10x a read loop).
  constexpr int kSets = M == 1 && !Half ? kFourPanelSets : kChains >= 8 ? 1 : 8 / kChains;
  int64_t w = std::min<int64_t>(32, j.n - q * 32);
  __mmask16 m0 = w >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << w) - 1);
  __mmask16 m1 = w >= 32 ? 0xFFFF : w > 16 ? static_cast<__mmask16>((1u << (w - 16)) - 1) : 0;
  __m512 acc[kSets][M][2];
#pragma GCC unroll 8
  for (auto& set : acc)
#pragma GCC unroll 8
    for (auto& row : set) row[0] = row[1] = _mm512_setzero_ps();
  // The whole depth in one pass: the accumulators stay in registers, so there
  // is nothing to block for; a prepacked panel is contiguous all k rows deep.
  const bool contiguous = j.packed && j.aCol == 1;
  const float* row = j.packed ? j.packed + panelBlock(q, 0, j.k, 32) : j.b + q * 32;
  int64_t stride = j.packed ? 32 : j.ldb;
  if (contiguous && prefetch) skinnySteps512<M, Half, kSets, true, true>(acc, row, stride, j.a, j.aRow, j.aCol, j.k, m0, m1);
  else if (contiguous) skinnySteps512<M, Half, kSets, true>(acc, row, stride, j.a, j.aRow, j.aCol, j.k, m0, m1);
  else skinnySteps512<M, Half, kSets, false>(acc, row, stride, j.a, j.aRow, j.aCol, j.k, m0, m1);
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    __m512 v0, v1;
    sumSets512<Half>(acc, i, v0, v1);
    storePanelRow512<Half>(j, i, q, v0, v1, m0, m1);
  }
}

constexpr int kFourPanels = 4;  // panels skinnyFourPanels512 takes at once

// One contraction step of the four panels: B's rows at `offset` in each, times x.
__attribute__((target("avx512f,fma"), always_inline)) inline void fourPanelStep(__m512 (&acc)[kFourPanels][2],
                                                                               const float* const (&row)[kFourPanels],
                                                                               int64_t offset, __m512 x) {
#pragma GCC unroll 4
  for (int i = 0; i < kFourPanels; ++i) {
    acc[i][0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(row[i] + offset), acc[i][0]);
    acc[i][1] = _mm512_fmadd_ps(x, _mm512_loadu_ps(row[i] + offset + 16), acc[i][1]);
  }
}
inline void advanceRows(const float* (&row)[kFourPanels], int64_t steps) {
#pragma GCC unroll 4
  for (auto& r : row) r += steps * 32;
}

// One row (whole panels, contiguous A) of four 32-column panels at a time: each
// broadcast of A feeds eight FMAs, not two, so the permutes leave port 5 to the
// FMAs. Panels held in this core's L2 (an LSTM step's or a two-thread MLP's
// part; an Emerald Rapids Xeon, 2 MiB L2) were read at 1.05-1.07x the time of a
// plain read loop over them, against 1.09-1.18x a panel at a time (k = 512 and
// 784), and about the same at k = 256. Each panel's columns are summed exactly as
// skinnyPanel512<1, false> sums them (kFourPanelSets sets taking the steps in
// turn, the same remainder, the same epilogue), so the grouping changes no bit.
// `Prefetch`: each 16 steps ask for the panels' next 16 rows (fourPanelPrefetch).
// Past a panel's last rows they reach the next panel's first, which is either
// one of the four (already streaming) or the next call's; past the buffer's end
// a prefetch never faults.
template <bool Prefetch>
__attribute__((target("avx512f,fma"))) void skinnyFourPanels512(const SkinnyJob& j, int64_t q) {
  constexpr int kPanels = kFourPanels, kSets = kFourPanelSets;
  const float* row[kPanels];
#pragma GCC unroll 4
  for (int i = 0; i < kPanels; ++i) row[i] = j.packed + panelBlock(q + i, 0, j.k, 32);
  __m512 acc[kSets][kPanels][2];
#pragma GCC unroll 4
  for (auto& set : acc)
#pragma GCC unroll 4
    for (auto& panel : set) panel[0] = panel[1] = _mm512_setzero_ps();
  const float* ap = j.a;
  int64_t p = 0;
  for (; p + 16 <= j.k; p += 16, ap += 16, advanceRows(row, 16)) {
    __m512 av = _mm512_loadu_ps(ap);
    if constexpr (Prefetch)
#pragma GCC unroll 4
      for (int i = 0; i < kPanels; ++i)
#pragma GCC unroll 32
        for (int l = 0; l < 32; ++l) _mm_prefetch(reinterpret_cast<const char*>(row[i] + 16 * 32 + 16 * l), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int s = 0; s < 16; ++s)
      fourPanelStep(acc[s % kSets], row, s * 32, _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_set1_epi32(s), av));
  }
  for (; p + kSets <= j.k; p += kSets, ap += kSets, advanceRows(row, kSets))
#pragma GCC unroll 2
    for (int s = 0; s < kSets; ++s) fourPanelStep(acc[s], row, s * 32, _mm512_set1_ps(ap[s]));
  for (; p < j.k; ++p, ++ap, advanceRows(row, 1)) fourPanelStep(acc[0], row, 0, _mm512_set1_ps(*ap));
#pragma GCC unroll 4
  for (int i = 0; i < kPanels; ++i) {
    __m512 v0, v1;
    sumSets512<false>(acc, i, v0, v1);
    storePanelRow512<false>(j, 0, q + i, v0, v1, 0xFFFF, 0xFFFF);
  }
}

// Any panel width and instruction set: plain loops over the same layouts.
void skinnyPanelPortable(const SkinnyJob& j, int64_t q, int64_t nr) {
  int64_t w = std::min(nr, j.n - q * nr);
  for (int64_t i = 0; i < j.m; ++i) {
    float acc[32] = {};
    for (int64_t p0 = 0; p0 < j.k; p0 += kKC) {
      int64_t kc = std::min(kKC, j.k - p0);
      const float* row = j.packed ? j.packed + panelBlock(q, p0, j.k, nr) : j.b + p0 * j.ldb + q * nr;
      int64_t stride = j.packed ? nr : j.ldb;
      for (int64_t p = 0; p < kc; ++p) {
        float x = j.a[i * j.aRow + (p0 + p) * j.aCol];
        for (int64_t c = 0; c < w; ++c) acc[c] += x * row[p * stride + c];
      }
    }
    float* out = j.c + i * j.ldc + q * nr;
    for (int64_t c = 0; c < w; ++c) {
      float v = j.accumulate ? out[c] + acc[c] : acc[c];
      if (j.post.bias) v += j.post.bias[q * nr + c];
      if (j.post.relu && v <= 0.0f) v = 0.0f;
      out[c] = v;
    }
  }
}

// Lane `l` (0-3) of each 128-bit half of `v`, in every lane of that half.
__attribute__((target("avx2"), always_inline)) inline __m256 lane256(__m256 v, int l) {
  switch (l) {
    case 0: return _mm256_permute_ps(v, 0x00);
    case 1: return _mm256_permute_ps(v, 0x55);
    case 2: return _mm256_permute_ps(v, 0xAA);
    default: return _mm256_permute_ps(v, 0xFF);
  }
}

// One row of a 16-column panel of B: prepacked (plain loads), or in place and
// masked to the panel's valid columns.
struct PanelRow256 {
  __m256 lo, hi;
};
template <bool Packed>
__attribute__((target("avx2"), always_inline)) inline PanelRow256 panelRow256(const float* r, __m256i mask0, __m256i mask1) {
  if constexpr (Packed) return {_mm256_loadu_ps(r), _mm256_loadu_ps(r + 8)};
  else return {_mm256_maskload_ps(r, mask0), _mm256_maskload_ps(r + 8, mask1)};
}

// One 16-column panel (AVX2's NR) for R <= 4 rows starting at row i0: 2R
// accumulators per set in registers; a partial panel read in place is loaded
// masked, so nothing past column n is touched. With one or two rows the depth is
// split over 4 or 2 sets of accumulators taking alternate rows of B: with one
// set, each FMA waited on the previous one's latency and a batch-1 layer read
// its weights at 35 GB/s from L3 where a plain read loop reaches 56.
template <int R, bool Packed>
__attribute__((target("avx2,fma"))) void skinnyRows256(const SkinnyJob& j, int64_t q, int64_t i0) {
  constexpr int kSets = R == 1 ? 4 : R == 2 ? 2 : 1;
  int64_t w = std::min<int64_t>(16, j.n - q * 16);
  alignas(32) static const int32_t kLanes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  __m256i lanes0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(kLanes));
  __m256i lanes1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(kLanes + 8));
  __m256i width = _mm256_set1_epi32(static_cast<int32_t>(w));
  __m256i mask0 = _mm256_cmpgt_epi32(width, lanes0), mask1 = _mm256_cmpgt_epi32(width, lanes1);
  __m256 acc[kSets][R][2];
#pragma GCC unroll 4
  for (auto& set : acc)
#pragma GCC unroll 4
    for (auto& row : set) row[0] = row[1] = _mm256_setzero_ps();
  // The steps are spelled out, not a lambda: through a lambda's captured
  // reference GCC kept the accumulators on the stack (a store per FMA; an 8-row
  // product ran at 20 GFLOP/s). The whole depth is one pass: a prepacked panel
  // is contiguous from its first row to its last (panel-major), and B in place
  // is one stride apart.
  const int64_t aRow = j.aRow, aCol = j.aCol, k = j.k;
  const float* a = j.a + i0 * aRow;
  const float* row = Packed ? j.packed + panelBlock(q, 0, k, 16) : j.b + q * 16;
  const int64_t stride = Packed ? 16 : j.ldb;
  int64_t p = 0;
  if constexpr (R == 1) {
    // One row: eight steps from one load of A, each step's value broadcast in
    // registers. A broadcast from memory per step made three loads per 64
    // bytes of B, and the load ports, not L2, set the pace (a 1x128x256
    // product took 1.3x the time of a plain read of its panels; now 1.03-1.1x).
    if (aCol == 1)
      for (; p + 8 <= k; p += 8) {
        __m256 av = _mm256_loadu_ps(a + p);
        __m256 halves[2] = {_mm256_permute2f128_ps(av, av, 0x00), _mm256_permute2f128_ps(av, av, 0x11)};
#pragma GCC unroll 8
        for (int s = 0; s < 8; ++s) {
          __m256 x = lane256(halves[s / 4], s % 4);
          PanelRow256 b = panelRow256<Packed>(row + (p + s) * stride, mask0, mask1);
          acc[s % 4][0][0] = _mm256_fmadd_ps(x, b.lo, acc[s % 4][0][0]);
          acc[s % 4][0][1] = _mm256_fmadd_ps(x, b.hi, acc[s % 4][0][1]);
        }
      }
  }
  for (; p + kSets <= k; p += kSets) {
#pragma GCC unroll 4
    for (int s = 0; s < kSets; ++s) {
      PanelRow256 b = panelRow256<Packed>(row + (p + s) * stride, mask0, mask1);
      // Loaded once for all R rows, as in skinnySteps512 (GCC folds the load
      // into each row's FMA otherwise: R loads of the same bytes a step).
      if constexpr (R > 1) asm("" : "+x"(b.lo), "+x"(b.hi));
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        __m256 x = _mm256_broadcast_ss(a + i * aRow + (p + s) * aCol);
        acc[s][i][0] = _mm256_fmadd_ps(x, b.lo, acc[s][i][0]);
        acc[s][i][1] = _mm256_fmadd_ps(x, b.hi, acc[s][i][1]);
      }
    }
  }
  for (; p < k; ++p) {
    PanelRow256 b = panelRow256<Packed>(row + p * stride, mask0, mask1);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m256 x = _mm256_broadcast_ss(a + i * aRow + p * aCol);
      acc[0][i][0] = _mm256_fmadd_ps(x, b.lo, acc[0][i][0]);
      acc[0][i][1] = _mm256_fmadd_ps(x, b.hi, acc[0][i][1]);
    }
  }
  // Unrolled like the steps: a loop over the rows here indexed the accumulators
  // by a variable, which kept them in memory throughout.
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m256 lo = acc[0][r][0], hi = acc[0][r][1];
#pragma GCC unroll 4
    for (int s = 1; s < kSets; ++s) {
      lo = _mm256_add_ps(lo, acc[s][r][0]);
      hi = _mm256_add_ps(hi, acc[s][r][1]);
    }
    float* out = j.c + (i0 + r) * j.ldc + q * 16;
    if (w == 16) {  // in registers: a scalar pass cost as much as a 128-deep panel's FMAs
      storeRow256(lo, hi, out, j.accumulate, nullptr, j.post.bias ? j.post.bias + q * 16 : nullptr, j.post.relu);
      continue;
    }
    alignas(32) float sums[16];
    _mm256_store_ps(sums, lo);
    _mm256_store_ps(sums + 8, hi);
    for (int64_t c = 0; c < w; ++c) {
      float v = j.accumulate ? out[c] + sums[c] : sums[c];
      if (j.post.bias) v += j.post.bias[q * 16 + c];
      if (j.post.relu && v <= 0.0f) v = 0.0f;
      out[c] = v;
    }
  }
}

template <bool Packed>
void skinnyPanel256(const SkinnyJob& j, int64_t q) {
  for (int64_t i0 = 0; i0 < j.m; i0 += 4) {
    switch (std::min<int64_t>(4, j.m - i0)) {
      case 1: skinnyRows256<1, Packed>(j, q, i0); break;
      case 2: skinnyRows256<2, Packed>(j, q, i0); break;
      case 3: skinnyRows256<3, Packed>(j, q, i0); break;
      default: skinnyRows256<4, Packed>(j, q, i0); break;
    }
  }
}

// A panel at most 16 columns wide (the last of a narrow product) skips the
// second half's FMAs, which would all be on padding.
template <int M>
void skinnyRows(const SkinnyJob& j, int64_t q, bool prefetch) {
  if (isa().vectorBits == 256) return j.packed ? skinnyPanel256<true>(j, q) : skinnyPanel256<false>(j, q);
  if (isa().tile.nr != 32) return skinnyPanelPortable(j, q, isa().tile.nr);
  if (j.n - q * 32 <= 16) skinnyPanel512<M, true>(j, q, prefetch);
  else skinnyPanel512<M, false>(j, q, prefetch);
}

// Panels [begin, end) of a product.
void runPanels(const SkinnyJob& j, int64_t begin, int64_t end) {
  using Fn = void (*)(const SkinnyJob&, int64_t, bool);
  static constexpr Fn kByRows[] = {skinnyRows<1>, skinnyRows<2>, skinnyRows<3>, skinnyRows<4>,
                                   skinnyRows<5>, skinnyRows<6>, skinnyRows<7>, skinnyRows<8>};
  Fn f = kByRows[j.m - 1];
  // Each thread's part, known by its first panel: the same part comes back to
  // the same thread call after call (an affine loop). Only the AVX-512 kernel
  // prefetches (the one measured), on Intel cores (farStreamPrefetch), so only
  // it keeps the records.
  int64_t panelFloats = isa().tile.nr * j.k;
  bool prefetch = j.packed && isa().vectorBits == 512 && farStreamPrefetch() && farStream(j.packed + begin * panelFloats,
                                        (end - begin) * panelFloats * static_cast<int64_t>(sizeof(float)));
  // A's rows are asked for at once: a layer's input, made by another thread's
  // part of the last product, comes line by line from that core otherwise, one
  // miss every sixteen steps (the second layer of a two-thread batch-1 MLP, 512
  // inputs, 5.97-6.35 us a part without, 5.42-5.67 with).
  // At most kPrefetchAFloats in all: a longer A would only evict its own
  // first lines from L1 before the steps reach them.
  if (j.aCol == 1)
    for (int64_t i = 0, ahead = std::min(j.k, kPrefetchAFloats / j.m); i < j.m; ++i)
      for (int64_t p = 0; p < ahead; p += 16) _mm_prefetch(reinterpret_cast<const char*>(j.a + i * j.aRow + p), _MM_HINT_T0);
  // One row from near panels: four whole panels at a time (skinnyFourPanels512),
  // the rest one at a time. A far stream keeps the single-panel kernel, whose
  // prefetches were measured with it.
  int64_t fourEnd = begin;
  if (j.m == 1 && j.packed && j.aCol == 1 && !prefetch && isa().vectorBits == 512 && isa().tile.nr == 32) {
    int64_t whole = std::clamp<int64_t>(j.n / 32, begin, end);  // panels below it are 32 columns wide
    fourEnd = begin + (whole - begin) / kFourPanels * kFourPanels;
  }
  auto four = fourPanelPrefetch() ? skinnyFourPanels512<true> : skinnyFourPanels512<false>;
  if (j.backward) {
    for (int64_t q = end; q-- > fourEnd;) f(j, q, prefetch);
    for (int64_t q = fourEnd; q > begin;) four(j, q -= kFourPanels);
  } else {
    for (int64_t q = begin; q < fourEnd; q += kFourPanels) four(j, q);
    for (int64_t q = fourEnd; q < end; ++q) f(j, q, prefetch);
  }
}

void skinnyTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  runPanels(*reinterpret_cast<const SkinnyJob*>(ctx), begin, end);
}

// A product and the loop after it (GemmEpilogue): the task's panels are
// [begin, end) of every column group, and then its loop iterations are those
// panels' columns, which only this thread wrote.
struct SkinnyThen {
  SkinnyJob job;
  GemmEpilogue then;
  int64_t groupPanels;
};

void skinnyThenTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const SkinnyThen& t = *reinterpret_cast<const SkinnyThen*>(ctx);
  int64_t groups = t.then.groups;
  for (int64_t i = 0; i < groups; ++i) {
    int64_t g = t.job.backward ? groups - 1 - i : i;
    runPanels(t.job, g * t.groupPanels + begin, g * t.groupPanels + end);
  }
  int64_t nr = isa().tile.nr;
  t.then.task(t.then.buffers, t.then.shapes, begin * nr, end * nr);
}

// What this thread knows of the weights it streamed recently: which way each
// went last (turnAround) and where its last stream began (farStream). Held
// through a pointer: the runtime's thread-locals use the initial-exec model,
// whose static space a library opened by dlopen shares with every other such
// library, and these 400 bytes there kept Python from loading the runtime.
struct StreamRecords {
  struct Turn {
    const float* b = nullptr;
    bool backward = false;
  };
  struct Began {
    const float* b = nullptr;
    uint64_t at = 0;  // `streamed` when its last stream began
  };
  Turn turns[8];
  Began began[kFarStreamSlots];
  uint64_t streamed = 0;  // bytes of prepacked weights streamed by this thread
};

StreamRecords& streamRecords() {
  thread_local std::unique_ptr<StreamRecords> records;
  if (!records) records = std::make_unique<StreamRecords>();
  return *records;
}

// Which way the panels of a weight were last streamed, per thread: each product
// with the same B goes the other way. Streamed in one direction, a B larger than
// a cache evicts itself in order, so the next call misses on every line (LRU
// keeps exactly the wrong part); turned around, the next call starts on the
// panels the last one read at its end, which are still cached. An LSTM step's
// 1 MB recurrent weight does not quite fit this machine's 1 MiB L2 beside the
// rest: the 32-step LSTM's fastest run went from 0.69-0.72 to 0.66-0.70 ms (one
// thread). A 128 KB weight read from L2 gained nothing measurable.
bool turnAround(const float* b) {
  StreamRecords::Turn& e = streamRecords().turns[recentSlot(b, 8)];
  if (e.b != b) {
    e = {b, false};
    return false;
  }
  e.backward = !e.backward;
  return e.backward;
}

}  // namespace

// Whether this thread's part of a prepacked weight comes from beyond its L2,
// so that the hardware prefetcher alone leaves bandwidth unused. Measured as a
// reuse distance: the bytes of weights this thread has streamed here since its
// last stream of the same weight began. Over twice the L2, too little of it can
// still be there for the next call (even turned around) and the panels stream
// from L3: a batch-1 MLP's 2.7 MB of layers on one thread went from 1.12-1.16x
// to 1.03-1.06x the time of a plain read loop over as many bytes with lines
// prefetched 1 KB ahead. Nearer, the prefetches only cost load slots: the
// two-thread MLP (1.35 MB a thread) went from 1.11x to 1.16x, and the LSTM's
// 1 MB step (L2 and L3) lost a tenth or more. A weight this thread has not streamed
// recently (or whose slot another took) is taken as near: the default of old.
uint64_t detail::farStreamBytes() {
  static const uint64_t kFar = [] {
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return 2 * static_cast<uint64_t>(l2 > 0 ? l2 : 1 << 20);
  }();
  return kFar;
}

namespace {
std::atomic<bool> gFarStreamPrefetch{hostCpuIsIntel()};
}  // namespace

bool detail::farStreamPrefetch() { return gFarStreamPrefetch.load(std::memory_order_relaxed); }
void detail::setFarStreamPrefetch(bool on) { gFarStreamPrefetch.store(on, std::memory_order_relaxed); }

namespace {
std::atomic<bool> gFourPanelPrefetch{hostCpuAmdFamily() >= 0x1a};
}  // namespace

bool detail::fourPanelPrefetch() { return gFourPanelPrefetch.load(std::memory_order_relaxed); }
void detail::setFourPanelPrefetch(bool on) { gFourPanelPrefetch.store(on, std::memory_order_relaxed); }

bool detail::farStream(const float* b, int64_t bytes) {
  StreamRecords& r = streamRecords();
  StreamRecords::Began& e = r.began[recentSlot(b, kFarStreamSlots)];
  bool far = e.b == b && r.streamed - e.at > farStreamBytes();
  e = {b, r.streamed};
  r.streamed += static_cast<uint64_t>(bytes);
  return far;
}

// Panels are shared out over the pool when the product is large enough, the
// same part to the same thread call after call: each thread then streams its
// own part of B from its own L2 when that part fits.
void detail::skinnyGemm(SkinnyJob&& j) {
  int64_t nr = isa().tile.nr;
  // A shift where the panel is AVX-512's 32 wide: a 64-bit division cost as
  // much as the rest of this function.
  int64_t panels = nr == 32 ? (j.n + 31) >> 5 : (j.n + nr - 1) / nr;
  j.backward = turnAround(j.packed ? j.packed : j.b);
  parallelFor(panels, j.m * j.n * j.k / 4, skinnyTask, reinterpret_cast<void* const*>(&j), nullptr, /*affine=*/true);
}

void detail::skinnyGemmThen(SkinnyJob&& j, const GemmEpilogue& then) {
  j.backward = turnAround(j.packed);
  SkinnyThen t{j, then, j.n / then.groups / isa().tile.nr};
  parallelFor(t.groupPanels, j.m * j.n * j.k / 4, skinnyThenTask, reinterpret_cast<void* const*>(&t), nullptr,
              /*affine=*/true);
}

// ---- few columns (n <= 16: a classifier head) and many rows ----
// The tile path would pad every row tile to 32 columns and use under half of
// each FMA; the skinny kernel instead runs 8 rows at a time against the one
// (half) panel, which stays in cache across the row chunks, shared out by rows.
namespace {

void narrowTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const SkinnyJob& j = *reinterpret_cast<const SkinnyJob*>(ctx);
  for (int64_t chunk = begin; chunk < end; ++chunk) {
    SkinnyJob part = j;
    int64_t i0 = chunk * kSkinnyRows;
    part.m = std::min(kSkinnyRows, j.m - i0);
    part.a = j.a + i0 * j.aRow;
    part.c = j.c + i0 * j.ldc;
    skinnyTask(reinterpret_cast<void* const*>(&part), nullptr, 0, 1);
  }
}

}  // namespace

void detail::narrowGemm(SkinnyJob&& j) {
  int64_t chunks = (j.m + kSkinnyRows - 1) / kSkinnyRows;
  parallelFor(chunks, j.m * j.n * j.k / 4, narrowTask, reinterpret_cast<void* const*>(&j), nullptr);
}

}  // namespace kiln::jit
