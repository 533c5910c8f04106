// The convolution's row path on AVX-512: each task copies the padded input rows
// its output rows read, with a strided convolution's columns split by phase, so
// that every tap of 16 neighbouring output pixels is 16 consecutive floats; a
// 4 x 64 register tile then reads them in place, with no gathered panel.
//
// Why: the panel path (conv2d.cc) gathers each 32-pixel panel's windows before
// its 8 x 32 tiles run. On an AVX-512 Zen 5 the gather took 16% of a 3x3
// stride-2 convolution of 32 channels and 23% of a 3-channel one, and the 8 x 32
// tile, whose eight broadcasts feed sixteen FMAs, tops out at 0.91 of FP32 peak
// where a 4 x 64 tile (four broadcasts, four loads, sixteen FMAs) reaches 0.99.
// The copy costs about one pass over the input.
#include <algorithm>
#include <climits>
#include <cstring>

#include "device/thread_pool.h"
#include "jit/conv2d_internal.h"
#include "jit/gemm_internal.h"

namespace kiln::jit::detail {

namespace {

constexpr int64_t kStripLanes = 16;  // a strip: up to 16 neighbouring output pixels of one row
constexpr int64_t kStrips = 4;       // strips a tile covers (64 lanes)
constexpr int64_t kTileRows = 4;     // output channels a tile covers
// rowTile and rowTask spell out the four strips' pointers one by one, and a
// tile's rows are half of one of the filters' 8-row panels.
static_assert(kStrips == 4 && kTileRows * 2 == 8);
// Floats past the copy: a strip's last loads may run past its phase row into the
// next one, and past the last row into these (their lanes are never stored).
constexpr int64_t kSlack = 64;
// An image whose padded copy would take more floats takes the panel path (a
// task copies a band of the copy: some of its rows).
constexpr int64_t kMaxCopyFloats = int64_t(1) << 26;

// The padded copy of one image (a task's band holds some of its rows). Channel
// c, padded row r (input row r - ph), phase q, element e holds input column
// e * sw + q - pw (zero outside the image), at c * channel + r * row + q * phase + e. Output pixel (oy, ox) reads tap
// (ky, kx) at row oy * sh + ky * dh, phase (kx * dw) % sw, element
// ox + (kx * dw) / sw: neighbouring pixels read neighbouring floats. A row is a
// multiple of 16 floats long (its phases are not), so that every row starts on
// a cache line: strips of phase 0's taps without a column offset load aligned
// vectors. (Phases rounded to 16 floats too aligned more of the loads, but the
// copy stored half as much again for model_bench's stride-2 convolution.)
struct PaddedLayout {
  int64_t rows = 0, phase = 0, row = 0, channel = 0, floats = 0;
};

// The layout, or floats = -1 when a size overflows or exceeds kMaxCopyFloats.
PaddedLayout paddedLayout(const Conv2dDims& d) {
  PaddedLayout p;
  p.floats = -1;
  int64_t down = 0, across = 0, rowsTaps = 0, colsTaps = 0;
  if (d.oh < 1 || d.ow < 1 || d.sh < 1 || d.sw < 1 || d.kh < 1 || d.kw < 1 || d.dh < 1 || d.dw < 1) return p;
  if (__builtin_mul_overflow(d.oh - 1, d.sh, &down) || __builtin_mul_overflow(d.kh - 1, d.dh, &rowsTaps) ||
      __builtin_mul_overflow(d.ow - 1, d.sw, &across) || __builtin_mul_overflow(d.kw - 1, d.dw, &colsTaps))
    return p;
  if (down > kMaxCopyFloats || rowsTaps > kMaxCopyFloats || across > kMaxCopyFloats || colsTaps > kMaxCopyFloats) return p;
  p.rows = down + rowsTaps + 1;
  p.phase = (across + colsTaps + 1 + d.sw - 1) / d.sw;
  p.row = (d.sw * p.phase + 15) / 16 * 16;
  if (p.row > kMaxCopyFloats / p.rows) return p;
  p.channel = p.rows * p.row;
  if (d.c < 1 || d.c > (kMaxCopyFloats - kSlack) / p.channel) return p;
  p.floats = d.c * p.channel + kSlack;
  return p;
}

// One padded input row into its phase rows (`phase` floats each): 16 elements
// of a phase a step, read straight from the input row `from` (`width` columns;
// plain loads inside it, masked ones across its ends, zero outside); stride 2
// reads 32 columns a step and keeps the even ones for one phase and the odd ones
// for the other; a phase's last step stores only its own elements. Sizes come
// as locals: read through the layout's fields, they were reloaded after every
// store.
template <int Stride>
__attribute__((target("avx512f"), always_inline)) inline void copyRow(const float* from, int64_t width, int64_t left,
                                                                     int64_t phase, float* to) {
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t e = 0; e < phase; e += 16) {
    int64_t first = e * Stride - left;  // the input column of phase 0's element e
    bool inside = first >= 0 && first + 16 * Stride <= width;
    __m512 lo = inside ? _mm512_loadu_ps(from + first) : loadColumns512(from, first, width);
    __mmask16 m = phase - e >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (phase - e)) - 1);
    if constexpr (Stride == 1) {
      _mm512_mask_storeu_ps(to + e, m, lo);
    } else {
      __m512 hi = inside ? _mm512_loadu_ps(from + first + 16) : loadColumns512(from, first + 16, width);
      _mm512_mask_storeu_ps(to + e, m, _mm512_permutex2var_ps(lo, evens, hi));
      _mm512_mask_storeu_ps(to + phase + e, m, _mm512_permutex2var_ps(lo, odds, hi));
    }
  }
}

// Input channels [c0, c0 + channels) of `image`, padded rows [r0, r1), into a
// band laid out as the padded copy with `channelFloats` a channel.
__attribute__((target("avx512f"))) void copyRows(const Conv2dDims& d, const PaddedLayout& p, const float* image, int64_t c0,
                                                 int64_t channels, int64_t r0, int64_t r1, int64_t channelFloats,
                                                 float* band) {
  const int64_t h = d.h, width = d.w, top = d.ph, left = d.pw, phase = p.phase, row = p.row;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t r = r0; r < r1; ++r) {
      float* to = band + c * channelFloats + (r - r0) * row;
      int64_t iy = r - top;
      if (iy < 0 || iy >= h) {
        std::memset(to, 0, sizeof(float) * static_cast<size_t>(row));
        continue;
      }
      const float* from = image + ((c0 + c) * h + iy) * width;
      if (d.sw == 1) copyRow<1>(from, width, left, phase, to);
      else copyRow<2>(from, width, left, phase, to);  // rowConvApplies: stride 1 or 2
    }
}

struct RowJob {
  Conv2dDims d;
  PaddedLayout p;
  const float* x;        // the input images
  const int32_t* taps;   // k offsets into a band, one per contraction index (c, ky, kx)
  const float* filters;  // group g at filters + g * k * mpad: slices `slice` deep of 8-row panels
  float* out;            // the output images
  int64_t k, og, cg, mpad, slice, pixels;
  int64_t stripsPerRow, tiles, tilesPerTask, tasksPerGroup;
  int64_t bandRows;  // padded rows a task's band holds at most, per channel
  ConvPostOps post;
};

// Output channels [row0, row0 + rows) of the group (rows <= 4: half of an 8-row
// filter panel) for the 64 lanes of four strips, over the contraction slice
// [p0, p0 + kc): added to what the earlier slices stored unless `first`, the
// post-ops applied when `last`. Each strip's loads start at its own address, so
// a tile's strips may lie on different output rows.
// Inlined into rowTask: as a call, a 3-channel convolution's 27-deep tiles paid
// for it (33.4 -> 31.5 us).
__attribute__((target("avx512f,fma"), always_inline)) inline void rowTile(
    const RowJob& j, const float* group, int64_t row0, int64_t rows, int64_t p0, int64_t kc,
    const float* const (&at)[kStrips], float* const (&to)[kStrips], const __mmask16 (&valid)[kStrips], const float* bias,
    bool first, bool last) {
  __m512 acc[kTileRows][kStrips];
#pragma GCC unroll 4
  for (auto& r : acc)
#pragma GCC unroll 4
    for (auto& v : r) v = _mm512_setzero_ps();
  const float *at0 = at[0], *at1 = at[1], *at2 = at[2], *at3 = at[3];
  const float* a = group + p0 * j.mpad + row0 / 8 * 8 * kc + row0 % 8;
  const int32_t* taps = j.taps + p0;
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p, a += 8) {
    int64_t o = taps[p];
    __m512 b[kStrips] = {_mm512_loadu_ps(at0 + o), _mm512_loadu_ps(at1 + o), _mm512_loadu_ps(at2 + o),
                         _mm512_loadu_ps(at3 + o)};
#pragma GCC unroll 4
    for (int r = 0; r < kTileRows; ++r) {
      __m512 x = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < kStrips; ++v) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int r = 0; r < kTileRows; ++r) {
    if (r == rows) break;
    __m512 add = last && bias ? _mm512_set1_ps(bias[r]) : zero;
#pragma GCC unroll 4
    for (int v = 0; v < kStrips; ++v) {
      float* out = to[v] + r * j.pixels;
      __m512 y = _mm512_add_ps(acc[r][v], add);
      if (!first) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(valid[v], out));
      // As nn.relu: v <= 0 becomes +0; NaN (an unordered compare) stays.
      if (last && j.post.relu) y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y, zero, _CMP_LE_OQ), y, zero);
      _mm512_mask_storeu_ps(out, valid[v], y);
    }
  }
}

// One task: a run of tiles (four strips each) of one image and group, over all
// its filters. The task first copies the padded rows its output rows read, of
// the group's channels, into a band of its own thread's: the copy is made by
// the thread that reads it, while the rows are in its caches, and takes memory
// for a task's rows rather than for the whole image (the few rows that the
// windows of two tasks share are copied by both).
__attribute__((target("avx512f,fma"))) void rowTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const RowJob& j = *reinterpret_cast<const RowJob*>(ctx);
  int64_t strips = j.d.oh * j.stripsPerRow, channelFloats = j.bandRows * j.p.row;
  float* band = scratch(1, static_cast<size_t>(j.cg * channelFloats + kSlack));
  std::memset(band + j.cg * channelFloats, 0, sizeof(float) * kSlack);
  for (int64_t t = begin; t < end; ++t) {
    int64_t img = t / (j.d.groups * j.tasksPerGroup), g = t / j.tasksPerGroup % j.d.groups;
    int64_t first = t % j.tasksPerGroup * j.tilesPerTask;
    const float* image = j.x + img * j.d.c * j.d.h * j.d.w;
    float* out = j.out + (img * j.d.o + g * j.og) * j.pixels;
    int64_t last = std::min(j.tiles, first + j.tilesPerTask);
    int64_t r0 = first * kStrips / j.stripsPerRow * j.d.sh;
    int64_t r1 = (std::min(strips, last * kStrips) - 1) / j.stripsPerRow * j.d.sh + (j.d.kh - 1) * j.d.dh + 1;
    copyRows(j.d, j.p, image, g * j.cg, j.cg, r0, r1, channelFloats, band);
    const float* group = j.filters + g * j.k * j.mpad;
    for (int64_t tile = first; tile < last; ++tile) {
      const float* at[kStrips];
      float* to[kStrips];
      __mmask16 valid[kStrips];
      for (int64_t v = 0; v < kStrips; ++v) {
        int64_t s = tile * kStrips + v;
        if (s >= strips) {  // past the last strip: read the first one's floats, store nothing
          at[v] = at[0];
          to[v] = to[0];
          valid[v] = 0;
          continue;
        }
        int64_t oy = s / j.stripsPerRow, ox = s % j.stripsPerRow * kStripLanes;
        int64_t lanes = std::min(kStripLanes, j.d.ow - ox);
        at[v] = band + (oy * j.d.sh - r0) * j.p.row + ox;
        to[v] = out + oy * j.d.ow + ox;
        valid[v] = static_cast<__mmask16>((1u << lanes) - 1);
      }
      // Slice by slice, every filter of the group: the slice's input rows are
      // read from L1 by all of them (the whole window of 32 channels, 3x3,
      // stride 2, two output rows, is 61 KB of lines: more than L1 holds).
      for (int64_t p0 = 0; p0 < j.k; p0 += j.slice) {
        int64_t kc = std::min(j.slice, j.k - p0);
        for (int64_t row0 = 0; row0 < j.og; row0 += kTileRows) {
          float* const rowsTo[kStrips] = {to[0] + row0 * j.pixels, to[1] + row0 * j.pixels, to[2] + row0 * j.pixels,
                                          to[3] + row0 * j.pixels};
          const float* bias = j.post.bias ? j.post.bias + g * j.og + row0 : nullptr;
          rowTile(j, group, row0, std::min(kTileRows, j.og - row0), p0, kc, at, rowsTo, valid, bias, p0 == 0,
                  p0 + kc == j.k);
        }
      }
    }
  }
}

}  // namespace

bool rowConvApplies(const Conv2dDims& d) {
  if (!__builtin_cpu_supports("avx512f") || d.sw > 2 || d.groups < 1 || d.c % d.groups != 0 || d.o % d.groups != 0)
    return false;
  // The copy's column loads take input columns as int32 (loadColumns512).
  if (d.ph < 0 || d.pw < 0 || d.ph > kMaxCopyFloats || d.pw > kMaxCopyFloats || d.w > INT32_MAX - 64) return false;
  // Strips never cross output rows: a row of ow pixels takes ceil(ow / 16)
  // strips, and the lanes past ow are computed for nothing. At least 80% used
  // (ow 13-16, 26-32, 56, ...); 7x7 outputs use 44% and take the panel path.
  int64_t strips = (d.ow + kStripLanes - 1) / kStripLanes;
  if (d.ow * 5 < strips * kStripLanes * 4) return false;
  PaddedLayout p = paddedLayout(d);
  // Tap offsets are int32 (the copy's floats, checked against INT32_MAX too).
  return p.floats > 0 && p.floats <= INT32_MAX;
}

void rowConv2d(const Conv2dDims& d, const float* x, const float* filters, int64_t mpad, int64_t slice, float* out,
               const ConvPostOps& post) {
  PaddedLayout p = paddedLayout(d);
  int64_t cg = d.c / d.groups, og = d.o / d.groups, k = cg * d.kh * d.kw, pixels = d.oh * d.ow;
  int64_t stripsPerRow = (d.ow + kStripLanes - 1) / kStripLanes;
  int64_t tiles = (d.oh * stripsPerRow + kStrips - 1) / kStrips;
  // A few tasks per thread in all, each a run of whole tiles of one image and group.
  int64_t wanted = std::max<int64_t>(1, 4 * device::currentThreads() / (d.n * d.groups));
  int64_t perTask = (tiles + std::min(tiles, wanted) - 1) / std::min(tiles, wanted);
  // A task's strips start anywhere in a row: they cover at most this many output rows.
  int64_t outRows = std::min(d.oh, (perTask * kStrips + stripsPerRow - 1) / stripsPerRow + 1);
  int64_t bandRows = std::min(p.rows, (outRows - 1) * d.sh + (d.kh - 1) * d.dh + 1);
  // The tap offsets, shared by the tasks (the calling thread's scratch, slot 2).
  auto* taps = reinterpret_cast<int32_t*>(scratch(2, static_cast<size_t>(k)));
  for (int64_t c = 0, i = 0; c < cg; ++c)
    for (int64_t ky = 0; ky < d.kh; ++ky)
      for (int64_t kx = 0; kx < d.kw; ++kx, ++i)
        taps[i] = static_cast<int32_t>(c * bandRows * p.row + ky * d.dh * p.row + kx * d.dw % d.sw * p.phase +
                                       kx * d.dw / d.sw);
  RowJob job{d,      p,           x,     taps,    filters,         out,      k,        og, cg, mpad, slice,
             pixels, stripsPerRow, tiles, perTask, (tiles + perTask - 1) / perTask, bandRows, post};
  device::parallelFor(d.n * d.groups * job.tasksPerGroup, d.n * d.o * pixels * k / 64, rowTask,
                      reinterpret_cast<void* const*>(&job), nullptr);
}

}  // namespace kiln::jit::detail
