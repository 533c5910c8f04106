// Direct convolution: filters packed once per call, input windows gathered into
// L1-resident panels, the GEMM micro-kernel, and the parallel driver.
#include "jit/conv2d.h"

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "device/thread_pool.h"
#include "jit/conv2d_internal.h"
#include "jit/gemm.h"
#include "jit/gemm_internal.h"
#include "kernel_ir/loop_ir.h"

namespace kiln::jit {

using namespace detail;

namespace {

struct ConvJob {
  Conv2dDims d;
  const float* x;
  float* out;
  const float* packedW;  // group g at packedW + g * k * mpad: KC slices of MR-tall panels
  int64_t cg, og, k, mpad, pixels;
  int64_t kc;  // contraction slice (convSlice)
  int64_t panelsPerTask, tasksPerImageGroup;
  // The vector gathers (AVX-512 for 32-wide panels, AVX2 for 16-wide ones) hold
  // every window coordinate and plane offset in 32-bit lanes: used only where
  // those fit in int32; otherwise the portable gather.
  enum class Gather { Portable, Avx512, Avx2 } gather;
  ConvPostOps post;
};

// Panels of one run reading windows at most this wide keep their taps' column
// masks in registers and stack (PanelOrigin::oneRun).
constexpr int64_t kMaxRunTaps = 8;

// Where the panel's pixels start reading: lane j covers output pixel j0 + j.
struct PanelOrigin {
  int32_t iy[32], ix[32];  // top-left input coordinate of each pixel's window (set by panelOrigin)
  int64_t count = 0;       // valid lanes (the last panel of an image is narrower)
  // Stride 1 or 2 and at most two output rows: lanes [0, split) are one run of
  // input columns on one row, lanes [split, count) another on the next.
  bool runs = false;
  int64_t split = 0;
  // All lanes one run and the window at most kMaxRunTaps wide: the gathers read
  // lane 0's origin and step along the row; otherwise they read every lane's.
  bool oneRun = false;
};

// Lanes [count, nr) are zero (the vector gathers load all nr and mask them off);
// lanes past nr are left unset: clearing the whole struct per panel was a tenth
// of a 3-channel convolution's time. A panel that is one run reads only lane 0's
// origin, so the per-lane ones are made only for others.
// Filled in place: returned by value, the struct was copied per panel.
void panelOrigin(const ConvJob& j, int64_t j0, int64_t nr, PanelOrigin& o) {
  o.count = std::min(nr, j.pixels - j0);
  int64_t oy = j0 / j.d.ow, ox = j0 % j.d.ow;
  o.runs = (j.d.sw == 1 || j.d.sw == 2) && ox + o.count <= 2 * j.d.ow;
  o.split = std::min(o.count, j.d.ow - ox);
  o.iy[0] = static_cast<int32_t>(oy * j.d.sh - j.d.ph);
  o.ix[0] = static_cast<int32_t>(ox * j.d.sw - j.d.pw);
  o.oneRun = o.runs && o.split == o.count && j.d.kw <= kMaxRunTaps;
  if (o.oneRun) return;
  for (int64_t l = o.count; l < nr; ++l) o.iy[l] = o.ix[l] = 0;
  // Stepped along the output row, one division per panel (not two per lane).
  for (int64_t l = 0; l < o.count; ++l) {
    o.iy[l] = static_cast<int32_t>(oy * j.d.sh - j.d.ph);
    o.ix[l] = static_cast<int32_t>(ox * j.d.sw - j.d.pw);
    if (++ox == j.d.ow) {
      ox = 0;
      ++oy;
    }
  }
}

// Row r of the panel, for contraction index kk = (c, ky, kx): the window
// element of each lane, zero outside the image. Portable version.
// Portable version, in int64 coordinates (any image size): lane l covers output
// pixel j0 + l, `count` lanes are valid.
void gatherRowPortable(const ConvJob& j, int64_t j0, int64_t count, const float* plane, int64_t ky, int64_t kx, int64_t nr,
                       float* row) {
  for (int64_t l = 0; l < nr; ++l) {
    float v = 0;
    if (l < count) {
      int64_t oy = (j0 + l) / j.d.ow, ox = (j0 + l) % j.d.ow;
      int64_t iy = oy * j.d.sh - j.d.ph + ky * j.d.dh, ix = ox * j.d.sw - j.d.pw + kx * j.d.dw;
      if (iy >= 0 && iy < j.d.h && ix >= 0 && ix < j.d.w) v = plane[iy * j.d.w + ix];
    }
    row[l] = v;
  }
}

// 16 lanes of a run: lane l reads column first + l * stride (stride 1 or 2) of
// `row`, zero outside [0, width); a null row (outside the image) reads zeros.
__attribute__((target("avx512f"), always_inline)) inline __m512 runLanes512(const float* row, int64_t first, int64_t stride,
                                                                           int64_t width) {
  if (!row) return _mm512_setzero_ps();
  __m512 lo = loadColumns512(row, first, width);
  if (stride == 1) return lo;
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_permutex2var_ps(lo, evens, loadColumns512(row, first + 16, width));
}

// The same for 32 lanes with AVX-512: masked contiguous loads where the lanes
// are one run of input pixels, masked gathers otherwise.
__attribute__((target("avx512f"), always_inline)) inline void gatherRow512(const ConvJob& j, const PanelOrigin& o, const float* plane, int64_t ky,
                                                     int64_t kx, float* row) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i h = _mm512_set1_epi32(static_cast<int32_t>(j.d.h)), w = _mm512_set1_epi32(static_cast<int32_t>(j.d.w));
  const __m512i zero = _mm512_setzero_si512();
  if (o.runs) {
    // Lane l of a run reads input column first + l * stride of its row: 16 lanes
    // span 16 * stride columns, loaded as 16-wide vectors with the columns
    // outside the image masked off (neither read nor faulted on); stride 2 then
    // keeps the even ones. A row outside the image reads as zeros.
    int64_t stride = j.d.sw;
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    auto rowOf = [&](int64_t lane0) -> const float* {
      int64_t iy = o.iy[lane0] + ky * j.d.dh;
      return iy < 0 || iy >= j.d.h ? nullptr : plane + iy * j.d.w;
    };
    const float* rowA = rowOf(0);
    int64_t firstA = o.ix[0] + kx * j.d.dw;  // the column lane 0 reads
    if (o.split == 32 && rowA && firstA >= 0 && firstA + 32 * stride <= j.d.w) {
      // One run wholly inside the image (most rows): plain loads.
      const float* at = rowA + firstA;
      for (int half = 0; half < 2; ++half, at += 16 * stride)
        _mm512_storeu_ps(row + half * 16, stride == 1 ? _mm512_loadu_ps(at)
                                                      : _mm512_permutex2var_ps(_mm512_loadu_ps(at), evens,
                                                                               _mm512_loadu_ps(at + 16)));
      return;
    }
    bool two = o.split < o.count;
    const float* rowB = two ? rowOf(o.split) : nullptr;
    // The second run's lane l reads column ix[split] + (l - split) * stride.
    int64_t firstB = two ? o.ix[o.split] + kx * j.d.dw - o.split * stride : 0;
    for (int half = 0; half < 2; ++half) {
      __m512i l = _mm512_add_epi32(lane, _mm512_set1_epi32(half * 16));
      __mmask16 valid = _mm512_cmplt_epi32_mask(l, _mm512_set1_epi32(static_cast<int32_t>(o.count)));
      __m512 v = runLanes512(rowA, firstA + half * 16 * stride, stride, j.d.w);
      if (two) {
        __mmask16 inB = _mm512_cmpge_epi32_mask(l, _mm512_set1_epi32(static_cast<int32_t>(o.split)));
        v = _mm512_mask_blend_ps(inB, v, runLanes512(rowB, firstB + half * 16 * stride, stride, j.d.w));
      }
      _mm512_storeu_ps(row + half * 16, _mm512_maskz_mov_ps(valid, v));
    }
    return;
  }
  __m512i dy = _mm512_set1_epi32(static_cast<int32_t>(ky * j.d.dh)), dx = _mm512_set1_epi32(static_cast<int32_t>(kx * j.d.dw));
  for (int half = 0; half < 2; ++half) {
    __m512i iy = _mm512_add_epi32(_mm512_loadu_si512(o.iy + half * 16), dy);
    __m512i ix = _mm512_add_epi32(_mm512_loadu_si512(o.ix + half * 16), dx);
    __m512i l = _mm512_add_epi32(lane, _mm512_set1_epi32(half * 16));
    __mmask16 m = _mm512_cmplt_epi32_mask(l, _mm512_set1_epi32(static_cast<int32_t>(o.count))) &
                  _mm512_cmpge_epi32_mask(iy, zero) & _mm512_cmplt_epi32_mask(iy, h) & _mm512_cmpge_epi32_mask(ix, zero) &
                  _mm512_cmplt_epi32_mask(ix, w);
    __m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(iy, w), ix);
    _mm512_storeu_ps(row + half * 16, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, plane, 4));
  }
}

// The panel's rows for contraction indices [p0, p0 + kc): (c, ky, kx) stepped
// along, one gathered row each. One call per panel slice, so the row loop and
// its constants stay inside the vector code.
//
// A panel on one output row (one run of input columns, the usual case when the
// output width is a multiple of 32) reads, for each kx, the same columns of every
// input row: their masks (the columns inside the image, from the padding) are
// made once per slice, and each row is then two or four masked loads, the even
// lanes kept for stride 2, and two stores, with no per-row mask arithmetic.

// 16 floats from byte address `at`, the lanes of `m` only.
__attribute__((target("avx512f"), always_inline)) inline __m512 maskedColumns(uintptr_t at, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(at));
}

__attribute__((target("avx512f"))) void gatherSlice512(const ConvJob& j, const PanelOrigin& o, const float* image, int64_t p0,
                                                       int64_t kc, int64_t nr, float* bp) {
  int64_t taps = j.d.kh * j.d.kw, plane = j.d.h * j.d.w;
  int64_t ch = p0 / taps, ky = p0 % taps / j.d.kw, kx = p0 % j.d.kw;
  const bool oneRun = o.oneRun;
  int64_t stride = j.d.sw, loads = 2 * stride;
  struct Columns {
    int64_t first;       // the input column lane 0 reads
    __mmask16 mask[4];   // of the loads of columns [first + 16q, first + 16q + 16)
  } cols[kMaxRunTaps];
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  __mmask16 valid0 = 0, valid1 = 0;
  if (oneRun) {
    for (int64_t t = 0; t < j.d.kw; ++t) {
      cols[t].first = o.ix[0] + t * j.d.dw;
      for (int64_t q = 0; q < loads; ++q) {
        __m512i col = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(cols[t].first + 16 * q)));
        cols[t].mask[q] = _mm512_cmpge_epi32_mask(col, _mm512_setzero_si512()) &
                          _mm512_cmplt_epi32_mask(col, _mm512_set1_epi32(static_cast<int32_t>(j.d.w)));
      }
    }
    valid0 = _mm512_cmplt_epi32_mask(lane, _mm512_set1_epi32(static_cast<int32_t>(o.count)));
    valid1 = _mm512_cmplt_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(16)), _mm512_set1_epi32(static_cast<int32_t>(o.count)));
  }
  for (int64_t r = 0; r < kc; ++r) {
    float* row = bp + r * nr;
    int64_t iy = o.iy[0] + ky * j.d.dh;
    if (!oneRun) {
      gatherRow512(j, o, image + ch * plane, ky, kx, row);
    } else if (iy < 0 || iy >= j.d.h) {
      _mm512_storeu_ps(row, _mm512_setzero_ps());
      _mm512_storeu_ps(row + 16, _mm512_setzero_ps());
    } else {
      // Masked-off columns are neither read nor faulted on; the address of a
      // column left of the image is formed as an integer, never as a pointer.
      const Columns& c = cols[kx];
      uintptr_t at = reinterpret_cast<uintptr_t>(image + ch * plane + iy * j.d.w) + static_cast<uintptr_t>(c.first * 4);
      __m512 lo, hi;
      if (stride == 1) {
        lo = maskedColumns(at, c.mask[0]);
        hi = maskedColumns(at + 64, c.mask[1]);
      } else {
        lo = _mm512_permutex2var_ps(maskedColumns(at, c.mask[0]), evens, maskedColumns(at + 64, c.mask[1]));
        hi = _mm512_permutex2var_ps(maskedColumns(at + 128, c.mask[2]), evens, maskedColumns(at + 192, c.mask[3]));
      }
      _mm512_storeu_ps(row, _mm512_maskz_mov_ps(valid0, lo));
      _mm512_storeu_ps(row + 16, _mm512_maskz_mov_ps(valid1, hi));
    }
    if (++kx == j.d.kw) {
      kx = 0;
      if (++ky == j.d.kh) {
        ky = 0;
        ++ch;
      }
    }
  }
}

// The AVX2 gather, for the 16-wide panels of the 6 x 16 tile, as gatherSlice512:
// a panel on one run of input columns (stride 1 or 2) makes each tap's column
// masks once per slice, then reads each row with two (stride 2: four) masked
// 8-wide loads, keeping the even lanes for stride 2; other panels gather.
// vmaskmovps neither reads nor faults on masked-off lanes.
namespace avx2 {

__attribute__((target("avx2"), always_inline)) inline __m256i columnMask(int64_t first, int64_t width) {
  __m256i col = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int32_t>(first)));
  __m256i insideLeft = _mm256_cmpgt_epi32(col, _mm256_set1_epi32(-1));
  __m256i insideRight = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(width)), col);
  return _mm256_and_si256(insideLeft, insideRight);
}

// Lanes 0, 2, 4, 6 of a then of b: the columns a stride-2 run reads.
__attribute__((target("avx2"), always_inline)) inline __m256 evens(__m256 a, __m256 b) {
  __m256 mixed = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // a0 a2 b0 b2 | a4 a6 b4 b6
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed), _MM_SHUFFLE(3, 1, 2, 0)));
}

__attribute__((target("avx2"), always_inline)) inline __m256 maskedColumns(uintptr_t at, __m256i m) {
  return _mm256_maskload_ps(reinterpret_cast<const float*>(at), m);
}

// Lanes [8 * half, 8 * half + 8) of the panel row for tap (ky, kx) by gathers,
// zero outside the image and past the panel's valid lanes.
__attribute__((target("avx2"), always_inline)) inline __m256 gatherLanes(const ConvJob& j, const PanelOrigin& o,
                                                                        const float* plane, int64_t ky, int64_t kx, int half) {
  __m256i iy = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o.iy + half * 8)),
                                _mm256_set1_epi32(static_cast<int32_t>(ky * j.d.dh)));
  __m256i ix = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o.ix + half * 8)),
                                _mm256_set1_epi32(static_cast<int32_t>(kx * j.d.dw)));
  __m256i lane = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(half * 8));
  __m256i minus1 = _mm256_set1_epi32(-1);
  __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(o.count)), lane);
  m = _mm256_and_si256(m, _mm256_cmpgt_epi32(iy, minus1));
  m = _mm256_and_si256(m, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(j.d.h)), iy));
  m = _mm256_and_si256(m, _mm256_cmpgt_epi32(ix, minus1));
  m = _mm256_and_si256(m, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(j.d.w)), ix));
  // Masked-off lanes are not read, so their (possibly wrapped) index is harmless.
  __m256i idx = _mm256_add_epi32(_mm256_mullo_epi32(iy, _mm256_set1_epi32(static_cast<int32_t>(j.d.w))), ix);
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), plane, idx, _mm256_castsi256_ps(m), 4);
}

// Which input columns a run's taps read: lane 0 of tap t reads column first[t];
// the loads of columns [first + 8q, first + 8q + 8) are masked by mask[t][q].
struct RunColumns {
  int64_t first[kMaxRunTaps];
  __m256i mask[kMaxRunTaps][4];
  bool whole[kMaxRunTaps];  // every load of the tap inside the row, all lanes valid: plain loads
};

// One panel row of a run: tap t of input row `at` (the address of column 0 of
// that row, as an integer: columns left of the image are never formed as
// pointers, and masked-off columns are not read).
template <int Stride, bool Whole>
__attribute__((target("avx2"), always_inline)) inline void runRow(const RunColumns& c, uintptr_t at, int64_t t, __m256 valid0,
                                                                 __m256 valid1, float* row) {
  uintptr_t first = at + static_cast<uintptr_t>(c.first[t] * 4);
  auto load = [&](int q) __attribute__((target("avx2"), always_inline)) {
    return Whole ? _mm256_loadu_ps(reinterpret_cast<const float*>(first + static_cast<uintptr_t>(32 * q)))
                 : maskedColumns(first + static_cast<uintptr_t>(32 * q), c.mask[t][q]);
  };
  __m256 lo, hi;
  if constexpr (Stride == 1) {
    lo = load(0);
    hi = load(1);
  } else {
    lo = evens(load(0), load(1));
    hi = evens(load(2), load(3));
  }
  _mm256_storeu_ps(row, Whole ? lo : _mm256_and_ps(lo, valid0));
  _mm256_storeu_ps(row + 8, Whole ? hi : _mm256_and_ps(hi, valid1));
}

// The rows of taps [kx, kx + n) of one input row. A tap's loads are plain or
// masked by its own columns: only the taps reaching into the padding pay for
// masks (all-or-nothing per panel put every panel of a 32-wide stride-2 output
// on masked loads).
template <int Stride>
__attribute__((target("avx2"), always_inline)) inline void runRows(const RunColumns& c, uintptr_t at, int64_t kx, int64_t n,
                                                                  __m256 valid0, __m256 valid1, float* row) {
  for (int64_t t = kx; t < kx + n; ++t, row += 16) {
    if (c.whole[t]) runRow<Stride, true>(c, at, t, valid0, valid1, row);
    else runRow<Stride, false>(c, at, t, valid0, valid1, row);
  }
}

__attribute__((target("avx2"))) void gatherSlice(const ConvJob& j, const PanelOrigin& o, const float* image, int64_t p0,
                                                 int64_t kc, float* bp) {
  constexpr int64_t nr = 16;
  int64_t taps = j.d.kh * j.d.kw, plane = j.d.h * j.d.w;
  int64_t ch = p0 / taps, ky = p0 % taps / j.d.kw, kx = p0 % j.d.kw;
  const bool oneRun = o.oneRun;
  if (!oneRun) {
    for (int64_t r = 0; r < kc; ++r) {
      _mm256_storeu_ps(bp + r * nr, gatherLanes(j, o, image + ch * plane, ky, kx, 0));
      _mm256_storeu_ps(bp + r * nr + 8, gatherLanes(j, o, image + ch * plane, ky, kx, 1));
      if (++kx == j.d.kw) {
        kx = 0;
        if (++ky == j.d.kh) {
          ky = 0;
          ++ch;
        }
      }
    }
    return;
  }
  // One run (the usual panel): the taps' columns and masks once per slice, then
  // per input row (channel, ky) one address and its kw rows of loads.
  int64_t stride = j.d.sw, loads = 2 * stride;
  RunColumns cols;
  for (int64_t t = 0; t < j.d.kw; ++t) {
    cols.first[t] = o.ix[0] + t * j.d.dw;
    cols.whole[t] = o.count == nr && cols.first[t] >= 0 && cols.first[t] + 8 * loads <= j.d.w;
    for (int64_t q = 0; q < loads; ++q) cols.mask[t][q] = columnMask(cols.first[t] + 8 * q, j.d.w);
  }
  __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), count = _mm256_set1_epi32(static_cast<int32_t>(o.count));
  __m256 valid0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(count, lane));
  __m256 valid1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(count, _mm256_add_epi32(lane, _mm256_set1_epi32(8))));
  for (int64_t r = 0; r < kc;) {
    int64_t n = std::min(j.d.kw - kx, kc - r);  // this input row's taps in the slice
    int64_t iy = o.iy[0] + ky * j.d.dh;
    float* row = bp + r * nr;
    if (iy < 0 || iy >= j.d.h) {
      for (int64_t t = 0; t < n; ++t) {
        _mm256_storeu_ps(row + t * nr, _mm256_setzero_ps());
        _mm256_storeu_ps(row + t * nr + 8, _mm256_setzero_ps());
      }
    } else {
      uintptr_t at = reinterpret_cast<uintptr_t>(image + ch * plane + iy * j.d.w);
      if (stride == 1) runRows<1>(cols, at, kx, n, valid0, valid1, row);
      else runRows<2>(cols, at, kx, n, valid0, valid1, row);
    }
    r += n;
    kx = 0;
    if (++ky == j.d.kh) {
      ky = 0;
      ++ch;
    }
  }
}

}  // namespace avx2

void gatherSlicePortable(const ConvJob& j, int64_t j0, int64_t count, const float* image, int64_t p0, int64_t kc,
                         int64_t nr, float* bp) {
  int64_t taps = j.d.kh * j.d.kw, plane = j.d.h * j.d.w;
  for (int64_t r = 0; r < kc; ++r) {
    int64_t kk = p0 + r;
    gatherRowPortable(j, j0, count, image + kk / taps * plane, kk % taps / j.d.kw, kk % j.d.kw, nr, bp + r * nr);
  }
}

// One task: a run of pixel panels of one image and group, over all its filters.
void convTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const ConvJob& j = *reinterpret_cast<const ConvJob*>(ctx);
  const Isa& cpu = isa();
  int64_t mr = cpu.tile.mr, nr = cpu.tile.nr;
  float* bp = scratch(1, static_cast<size_t>(j.kc * nr));
  int64_t panels = (j.pixels + nr - 1) / nr;
  for (int64_t t = begin; t < end; ++t) {
    int64_t img = t / (j.d.groups * j.tasksPerImageGroup);
    int64_t g = t / j.tasksPerImageGroup % j.d.groups;
    int64_t first = t % j.tasksPerImageGroup * j.panelsPerTask;
    const float* image = j.x + (img * j.d.c + g * j.cg) * j.d.h * j.d.w;
    float* c = j.out + (img * j.d.o + g * j.og) * j.pixels;
    const float* aGroup = j.packedW + g * j.k * j.mpad;
    for (int64_t q = first; q < std::min(panels, first + j.panelsPerTask); ++q) {
      int64_t j0 = q * nr;
      int64_t count = std::min(nr, j.pixels - j0);
      PanelOrigin origin;
      if (j.gather != ConvJob::Gather::Portable) panelOrigin(j, j0, nr, origin);
      for (int64_t p0 = 0; p0 < j.k; p0 += j.kc) {
        int64_t kc = std::min(j.kc, j.k - p0);
        switch (j.gather) {
          case ConvJob::Gather::Avx512: gatherSlice512(j, origin, image, p0, kc, nr, bp); break;
          case ConvJob::Gather::Avx2: avx2::gatherSlice(j, origin, image, p0, kc, bp); break;
          case ConvJob::Gather::Portable: gatherSlicePortable(j, j0, count, image, p0, kc, nr, bp); break;
        }
        const float* aslice = aGroup + p0 * j.mpad;
        // The post-ops in the micro-kernel's registers, with the last slice: a
        // pass after the tile's store re-read rows a plane apart (one L1 set),
        // and cost as much as a separate pass over the output.
        bool last = p0 + kc == j.k, withPost = last && (j.post.bias || j.post.relu);
        for (int64_t ir = 0; ir < j.og; ir += mr) {
          MicroPost post{j.post.bias ? j.post.bias + g * j.og + ir : nullptr, j.post.relu};
          cpu.micro(kc, aslice + (ir / mr) * mr * kc, bp, c + ir * j.pixels + j0, j.pixels, std::min(mr, j.og - ir), count,
                    p0 > 0, withPost ? &post : nullptr);
        }
      }
    }
  }
}

}  // namespace

namespace {

// The contraction slice: the whole window when its panel (k x NR floats) fits
// in 20 KiB of L1 beside the filter rows streaming through, so that each output
// tile is written once, post-ops included; otherwise equal slices of at most 160
// (a 32-wide panel of 18 KiB). Slices of 128 left a short remainder (a 3x3 window
// of 32 channels, 288 deep, ran 128 + 128 + 32, each slice storing and
// re-reading every tile); as 144 + 144 the row path's (conv2d_rows.cc) stride-2
// convolution of model_bench took 168 us instead of 173.
int64_t convSlice(int64_t k, int64_t nr) {
  if (k * nr * 4 <= 20 * 1024) return k;
  int64_t slices = (k + 159) / 160;
  return (k + slices - 1) / slices;
}

// The filters of every group as the A operand, rows [g*og, (g+1)*og) of the o x
// k matrix: group g at out + g * k * mpad, its slice at depth p0 at + p0 * mpad.
void packFilters(const float* w, int64_t o, int64_t k, int64_t groups, float* out) {
  const Tile tile = isa().tile;
  int64_t og = o / groups, kc = convSlice(k, tile.nr);
  int64_t mpad = (og + tile.mr - 1) / tile.mr * tile.mr;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t p0 = 0; p0 < k; p0 += kc)
      packA(w, k, false, g * og, og, p0, std::min(kc, k - p0), tile.mr, out + g * k * mpad + p0 * mpad);
}

}  // namespace

int64_t packedConvFilterFloats(int64_t o, int64_t k, int64_t groups) {
  if (o <= 0 || k <= 0 || groups <= 0 || o % groups != 0) return -1;
  int64_t mr = isa().tile.mr, og = o / groups;
  int64_t mpad = (og + mr - 1) / mr * mr;
  if (mpad > INT64_MAX / 4 / groups || k > (INT64_MAX / 4 - kPackedHeaderFloats) / (groups * mpad)) return -1;
  return kPackedHeaderFloats + groups * k * mpad;
}

void packConvFilter(const float* w, int64_t o, int64_t k, int64_t groups, float* out) {
  // The slice is part of the layout: a packing made for another tile or slice is refused.
  int64_t header[5] = {o, k, groups, isa().tile.mr, convSlice(k, isa().tile.nr)};
  std::memset(out, 0, sizeof(float) * kPackedHeaderFloats);
  std::memcpy(out, header, sizeof header);
  packFilters(w, o, k, groups, out + kPackedHeaderFloats);
}

bool packedConvFilterMatches(const float* packed, int64_t o, int64_t k, int64_t groups) {
  int64_t header[5];
  std::memcpy(header, packed, sizeof header);
  return header[0] == o && header[1] == k && header[2] == groups && header[3] == isa().tile.mr &&
         header[4] == convSlice(k, isa().tile.nr);
}

int64_t packedConvFilterWithWinogradFloats(int64_t o, int64_t c, int64_t form) {
  int64_t direct = c > 0 && c <= INT64_MAX / 9 ? packedConvFilterFloats(o, c * 9, 1) : -1;
  int64_t winograd = winogradFilterFloats(o, c, form);
  if (direct < 0 || winograd < 0 || direct > INT64_MAX / 4 - winograd) return -1;
  return direct + winograd;
}

// The direct packing's header slot (int64s, two floats each) that holds the
// form (loop::winogradForm) of the Winograd transform after it, or 0.
constexpr int64_t kWinogradFormSlot = 5;

void packConvFilterWithWinograd(const float* w, int64_t o, int64_t c, int64_t form, float* out) {
  packConvFilter(w, o, c * 9, 1, out);
  std::memcpy(out + kWinogradFormSlot * 2, &form, sizeof form);
  packWinogradFilter(w, o, c, form, out + packedConvFilterFloats(o, c * 9, 1));
}

const float* winogradFormOf(const float* packed, int64_t o, int64_t c, int64_t form) {
  if (!packed || c <= 0 || c > INT64_MAX / 9 || !packedConvFilterMatches(packed, o, c * 9, 1)) return nullptr;
  int64_t follows = 0;
  std::memcpy(&follows, packed + kWinogradFormSlot * 2, sizeof follows);
  return follows == form ? winogradFilters(packed + packedConvFilterFloats(o, c * 9, 1), o, c, form) : nullptr;
}

namespace {

// Whether input offsets and window coordinates (from -padding to (out - 1) *
// stride + (window - 1) * dilation) fit in int32, as the vector gathers take them.
bool windowsFitInt32(const Conv2dDims& d) {
  auto fits = [](int64_t out, int64_t stride, int64_t window, int64_t dilation, int64_t pad) {
    return pad <= INT32_MAX && (out - 1) <= INT32_MAX / stride && (window - 1) <= INT32_MAX / dilation &&
           (out - 1) * stride <= INT32_MAX - (window - 1) * dilation;
  };
  return d.h * d.w <= INT32_MAX && fits(d.oh, d.sh, d.kh, d.dh, d.ph) && fits(d.ow, d.sw, d.kw, d.dw, d.pw);
}

}  // namespace

namespace detail {

const float* convFilters(const Conv2dDims& d, const float* w, const float* packedW, int64_t& mpad, int64_t& slice) {
  const Tile tile = isa().tile;
  int64_t og = d.o / d.groups, k = d.c / d.groups * d.kh * d.kw;
  mpad = (og + tile.mr - 1) / tile.mr * tile.mr;
  slice = convSlice(k, tile.nr);
  if (packedW && packedConvFilterMatches(packedW, d.o, k, d.groups)) return packedW + kPackedHeaderFloats;
  float* packed = scratch(0, static_cast<size_t>(d.groups * k * mpad));
  packFilters(w, d.o, k, d.groups, packed);
  return packed;
}

namespace {

// Whether filters without a prepared transform pay for one per call. With the
// vector transform (conv2d_winograd.cc), per call against the direct path on
// Zen 4, one and two threads: 64 x 64 filters at stride 1 took 0.54-0.68 of its
// time with 64 2x2 tiles, 0.87-0.92 with 32 (1.13-1.28 with 256 channels), 1.22-1.36
// with 16; at stride 2 0.79-0.93 with 64 tiles, 1.36-1.63 with 32. (The scalar
// transform before it needed 512.) Counted in 2x2 tiles for every form: a 4x4
// tile saves about four 2x2 ones' products, and its filter transform costs
// about twice as much.
bool transformPaysPerCall(const Conv2dDims& d) {
  int64_t tiles = 0;
  return !__builtin_mul_overflow(d.n, ((d.oh + 1) / 2) * ((d.ow + 1) / 2), &tiles) && tiles >= 64;
}

}  // namespace

int64_t winogradFormFor(const Conv2dDims& d, MinimalFiltering minimal) {
  if (minimal == MinimalFiltering::Off) return 0;
  if (minimal == MinimalFiltering::Tiles4x4 && winogradApplies(d, loop::kWinogradF4)) return loop::kWinogradF4;
  int64_t form = loop::winogradForm(d.sh, 2);
  return form != 0 && winogradApplies(d, form) ? form : 0;
}

bool takesWinograd(const Conv2dDims& d, const float* packedW, MinimalFiltering minimal) {
  int64_t form = winogradFormFor(d, minimal);
  return form != 0 && (winogradFormOf(packedW, d.o, d.c, form) || transformPaysPerCall(d));
}

bool takesRowPath(const Conv2dDims& d) {
  const Isa& cpu = isa();
  return windowsFitInt32(d) && cpu.tile.mr == 8 && cpu.tile.nr == 32 && __builtin_cpu_supports("avx512f") &&
         rowConvApplies(d);
}

}  // namespace detail

void sconv2d(const Conv2dDims& d, const float* x, const float* w, const float* packedW, float* out,
             const ConvPostOps& post, MinimalFiltering minimal) {
  int64_t pixels = d.oh * d.ow;
  if (d.n <= 0 || d.o <= 0 || pixels <= 0) return;
  int64_t cg = d.c / d.groups, og = d.o / d.groups, k = cg * d.kh * d.kw;
  if (k <= 0) {  // empty windows: every sum is 0, then the post-ops
    for (int64_t i = 0; i < d.n * d.o; ++i) {
      float v = post.bias ? post.bias[i % d.o] : 0.0f;
      if (post.relu && v <= 0.0f) v = 0.0f;
      std::fill(out + i * pixels, out + (i + 1) * pixels, v);
    }
    return;
  }
  // A 3x3 convolution of stride 1 or 2 takes fewer products by minimal
  // filtering (conv2d_winograd.cc), its filters transformed with the constant
  // or, where that pays, now.
  if (int64_t form = winogradFormFor(d, minimal)) {
    const float* u = winogradFormOf(packedW, d.o, d.c, form);
    if (!u && transformPaysPerCall(d)) {
      float* t = scratch(0, static_cast<size_t>(winogradFilterFloats(d.o, d.c, form)));
      packWinogradFilter(w, d.o, d.c, form, t);
      u = t + kPackedHeaderFloats;
    }
    if (u) return winogradConv2d(d, x, u, out, post, form);
  }
  const Isa& cpu = isa();
  int64_t nr = cpu.tile.nr, mpad = 0, slice = 0;
  // Filters prepacked once for a constant weight, or packed now.
  const float* filters = convFilters(d, w, packedW, mpad, slice);
  // Output rows that fill 16-lane strips read padded copies of their input rows
  // in place instead (conv2d_rows.cc), with the same packed filters (8-row panels).
  if (takesRowPath(d)) return rowConv2d(d, x, filters, mpad, slice, out, post);
  // A few tasks per thread in all, each a run of whole panels of one image and group.
  int64_t panels = (pixels + nr - 1) / nr;
  int64_t wanted = std::max<int64_t>(1, 4 * device::currentThreads() / std::max<int64_t>(1, d.n * d.groups));
  int64_t perTask = (panels + std::min(panels, wanted) - 1) / std::min(panels, wanted);
  bool in32 = windowsFitInt32(d);
  auto gather = ConvJob::Gather::Portable;
  if (in32 && nr == 32 && __builtin_cpu_supports("avx512f")) gather = ConvJob::Gather::Avx512;
  if (in32 && nr == 16 && __builtin_cpu_supports("avx2")) gather = ConvJob::Gather::Avx2;
  ConvJob job{d, x, out, filters, cg, og, k, mpad, pixels, slice, perTask, (panels + perTask - 1) / perTask, gather, post};
  device::parallelFor(d.n * d.groups * job.tasksPerImageGroup, d.n * d.o * pixels * k / 64, convTask,
                      reinterpret_cast<void* const*>(&job), nullptr);
}

}  // namespace kiln::jit

extern "C" void kiln_sconv2d(const int64_t* dims, const float* x, const float* w, const float* packedW, float* out,
                             const float* bias, int64_t flags) {
  kiln::jit::Conv2dDims d;
  std::memcpy(&d, dims, sizeof d);
  // Bit 0 of `flags`: ReLU; bit 1: on the calling thread alone; bits 3 and 4: minimal filtering.
  kiln::device::underScopes((flags & 2) != 0, kiln::device::grainFromFlags(flags) /* bits 25-30 */, [&] {
    kiln::jit::sconv2d(d, x, w, packedW, out, kiln::jit::ConvPostOps{bias, (flags & 1) != 0},
                       kiln::jit::minimalFilteringFromFlags(flags));
  });
}
