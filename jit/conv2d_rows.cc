// The convolution's row path on AVX-512: each task copies the padded input rows
// its output rows read, with a strided convolution's columns split by phase, so
// that every tap of 16 neighbouring output pixels is 16 consecutive floats; a
// 4 x 64 register tile then reads them in place, with no gathered panel. Two
// chained convolutions (rowConv2dChained) skip the second's copy: each of its
// tasks computes the rows of the first's output its band holds into the band.
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
// multiple of 16 floats long, and so is a stride-2 row's phase, so that every
// row and phase starts on a cache line: strips of taps without a column offset
// load aligned vectors (of a 3x3 stride-2 window, two taps of three instead of
// one). model_bench's stride-2 convolution alone took 6% less time so (A/B in
// one process, 500 alternations), though its copy stores 96 floats a row
// instead of 80; chained, where its first's padding cells are cleared rather
// than copied, 2.5% less.
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
  if (d.sw > 1) p.phase = (p.phase + 15) / 16 * 16;
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

// Where tiles store: the output images (NCHW), or, for the first of two chained
// convolutions (rowConv2dChained), a band of the second's padded copy, whose
// rows (output row y at padded row y + top) are split into `stride` phases as
// the second's own copy would split them.
struct RowOutput {
  float* base;
  int64_t image, channel;  // floats between images, between output channels
  int64_t top = 0, left = 0, stride = 0;  // stride 0: NCHW rows of ow pixels
  PaddedLayout p;  // the consumer's layout (when stride > 0)
};

struct RowJob {
  Conv2dDims d;
  PaddedLayout p;
  const float* x;        // the input images
  const int32_t* taps;   // k offsets into a band, one per contraction index (c, ky, kx)
  const float* filters;  // group g at filters + g * k * mpad: slices `slice` deep of 8-row panels
  RowOutput out;
  int64_t k, og, cg, mpad, slice;
  int64_t stripsPerRow, tiles, tilesPerTask, tasksPerGroup;
  int64_t bandRows;  // padded rows a task's band holds at most, per channel
  ConvPostOps post;
  // Chained: the convolution whose output is this one's input. A task then
  // computes the rows of it that its band holds, into the band, instead of
  // copying them (rowConv2dChained).
  const RowJob* producer = nullptr;
};

// As nn.relu when `on`: v <= 0 becomes +0; NaN (an unordered compare) stays.
__attribute__((target("avx512f"), always_inline)) inline __m512 reluIf(bool on, __m512 y) {
  const __m512 zero = _mm512_setzero_ps();
  return on ? _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y, zero, _CMP_LE_OQ), y, zero) : y;
}

// Output channels [row0, row0 + rows) of the group (rows <= 4: half of an 8-row
// filter panel) for the 64 lanes of four strips, over the contraction slice
// [p0, p0 + kc): added to what the earlier slices stored unless `first`, the
// post-ops applied when `last`; output channels `channel` floats apart. Each
// strip's loads start at its own address, so a tile's strips may lie on
// different output rows.
// Split (a producer writing a stride-2 consumer's band): strips v and v + 1 (v
// even) are one run of 32 pixels, stored as its even lanes from to[v] on
// (valid[v] of them) and its odd lanes from odd[v] on (oddValid[v]): 16
// elements of each phase row (runTiles).
// Inlined into its task: as a call, a 3-channel convolution's 27-deep tiles
// paid for it (33.4 -> 31.5 us).
template <bool Split>
__attribute__((target("avx512f,avx512vl,fma"), always_inline)) inline void rowTile(
    const RowJob& j, const float* group, int64_t row0, int64_t rows, int64_t p0, int64_t kc,
    const float* const (&at)[kStrips], float* const (&to)[kStrips], const __mmask16 (&valid)[kStrips],
    float* const (&odd)[kStrips], const __mmask16 (&oddValid)[kStrips], int64_t channel, const float* bias, bool first,
    bool last) {
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
  const bool relu = last && j.post.relu;
#pragma GCC unroll 4
  for (int r = 0; r < kTileRows; ++r) {
    if (r == rows) break;
    __m512 add = last && bias ? _mm512_set1_ps(bias[r]) : zero;
    if constexpr (!Split) {
#pragma GCC unroll 4
      for (int v = 0; v < kStrips; ++v) {
        float* out = to[v] + r * channel;
        __m512 y = _mm512_add_ps(acc[r][v], add);
        if (!first) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(valid[v], out));
        _mm512_mask_storeu_ps(out, valid[v], reluIf(relu, y));
      }
    } else {
      // Two strips of 32 neighbouring pixels give 16 elements of each phase row.
      const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
#pragma GCC unroll 2
      for (int v = 0; v < kStrips; v += 2) {
        float *out = to[v] + r * channel, *outOdd = odd[v] + r * channel;
        __m512 y0 = _mm512_add_ps(acc[r][v], add), y1 = _mm512_add_ps(acc[r][v + 1], add);
        __m512 e = _mm512_permutex2var_ps(y0, evens, y1), o = _mm512_permutex2var_ps(y0, odds, y1);
        if (!first) {
          e = _mm512_add_ps(e, _mm512_maskz_loadu_ps(valid[v], out));
          o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(oddValid[v], outOdd));
        }
        _mm512_mask_storeu_ps(out, valid[v], reluIf(relu, e));
        _mm512_mask_storeu_ps(outOdd, oddValid[v], reluIf(relu, o));
      }
    }
  }
}

// The tiles over strips [s0, s1) of one image and group (strips outside them
// in those tiles store nothing), reading `rows`, the band whose first row is
// padded row r0, and storing through `o`.
template <bool Split>
__attribute__((target("avx512f,avx512vl,fma"), always_inline)) inline void runTiles(const RowJob& j, int64_t img, int64_t g,
                                                                         int64_t s0, int64_t s1, const float* rows,
                                                                         int64_t r0, const RowOutput& o) {
  float* out = o.base + img * o.image + g * j.og * o.channel;
  const float* group = j.filters + g * j.k * j.mpad;
  for (int64_t tile = s0 / kStrips; tile * kStrips < s1; ++tile) {
    const float* at[kStrips];
    float *to[kStrips], *odd[kStrips];
    __mmask16 valid[kStrips], oddValid[kStrips];
    for (int64_t v = 0; v < kStrips; ++v) {
      int64_t s = tile * kStrips + v;
      odd[v] = nullptr;
      oddValid[v] = 0;
      if (s < s0 || s >= s1) {  // outside the range: read the first strip's floats, store nothing
        int64_t first = std::max(s0, tile * kStrips);
        at[v] = rows + (first / j.stripsPerRow * j.d.sh - r0) * j.p.row + first % j.stripsPerRow * kStripLanes;
        to[v] = out;
        valid[v] = 0;
        continue;
      }
      int64_t oy = s / j.stripsPerRow, ox = s % j.stripsPerRow * kStripLanes;
      int64_t lanes = std::min(kStripLanes, j.d.ow - ox);
      at[v] = rows + (oy * j.d.sh - r0) * j.p.row + ox;
      valid[v] = static_cast<__mmask16>((1u << lanes) - 1);
      if (o.stride == 0) {
        to[v] = out + oy * j.d.ow + ox;
        continue;
      }
      // Pixel ox + l goes to padded column c = ox + l + left: phase c % stride, element c / stride.
      float* row = out + (oy + o.top) * o.p.row;
      int64_t c = ox + o.left;
      if constexpr (Split) {
        int64_t even = c % 2;  // the phase of the even lanes; the odd lanes take the other
        to[v] = row + even * o.p.phase + c / 2;
        odd[v] = row + (1 - even) * o.p.phase + (c + 1) / 2;
      } else {
        to[v] = row + c;
      }
    }
    if constexpr (Split) {
      // The tile stores strips v and v + 1 (v even) as one run of 32 pixels,
      // whose even and odd lanes are 16 elements of a phase row each: they are
      // neighbours on one row (stripsPerRow is even: rowChainApplies), the first
      // full, and both or neither in [s0, s1) (the producer's ranges are whole
      // rows). valid[v] and oddValid[v] become the run's.
      for (int64_t v = 0; v < kStrips; v += 2) {
        int lanes = valid[v] ? 16 + __builtin_popcount(valid[v + 1]) : 0;
        valid[v] = static_cast<__mmask16>((1u << ((lanes + 1) / 2)) - 1);
        oddValid[v] = static_cast<__mmask16>((1u << (lanes / 2)) - 1);
      }
    }
    // Slice by slice, every filter of the group: the slice's input rows are
    // read from L1 by all of them (the whole window of 32 channels, 3x3,
    // stride 2, two output rows, is 61 KB of lines: more than L1 holds).
    for (int64_t p0 = 0; p0 < j.k; p0 += j.slice) {
      int64_t kc = std::min(j.slice, j.k - p0);
      for (int64_t row0 = 0; row0 < j.og; row0 += kTileRows) {
        int64_t shift = row0 * o.channel;
        float* const rowsTo[kStrips] = {to[0] + shift, to[1] + shift, to[2] + shift, to[3] + shift};
        float* rowsOdd[kStrips] = {};
        if constexpr (Split)
          for (int v = 0; v < kStrips; ++v) rowsOdd[v] = odd[v] ? odd[v] + shift : rowsTo[v];
        const float* bias = j.post.bias ? j.post.bias + g * j.og + row0 : nullptr;
        rowTile<Split>(j, group, row0, std::min(kTileRows, j.og - row0), p0, kc, at, rowsTo, valid, rowsOdd, oddValid,
                       o.channel, bias, p0 == 0, p0 + kc == j.k);
      }
    }
  }
}

// The padded rows [r0, r1) that strips [s0, s1) of a job read.
inline int64_t firstRow(const RowJob& j, int64_t s0) { return s0 / j.stripsPerRow * j.d.sh; }
inline int64_t endRow(const RowJob& j, int64_t s1) {
  return (s1 - 1) / j.stripsPerRow * j.d.sh + (j.d.kh - 1) * j.d.dh + 1;
}

// n floats from `at` become zero: masked vector stores, no call.
__attribute__((target("avx512f"), always_inline)) inline void zeroFloats(float* at, int64_t n) {
  for (int64_t e = 0; e < n; e += 16)
    _mm512_mask_storeu_ps(at + e, static_cast<__mmask16>(n - e >= 16 ? 0xFFFF : (1u << (n - e)) - 1), _mm512_setzero_ps());
}

// A chained task's band (channel c's padded row r at band + c * channelFloats +
// (r - r0) * row): its producer's output rows [r0 - ph, r1 - ph), computed into
// it (their phase split as the copy splits them), and zero where the copy has
// padding. The producer reads its own input through a band of its own (slot 1).
template <bool Split>
__attribute__((target("avx512f,avx512vl,fma"))) void produceRows(const RowJob& j, int64_t img, int64_t r0, int64_t r1,
                                                        int64_t channelFloats, float* band) {
  const RowJob& a = *j.producer;
  const int64_t ph = j.d.ph, h = j.d.h, phase = j.p.phase, row = j.p.row, sw = j.d.sw;
  // Phase q's element e holds column e * sw + q - pw: inside the image for e in [left[q], right[q]).
  int64_t left[2], right[2];
  for (int64_t q = 0; q < sw; ++q) {
    left[q] = std::clamp<int64_t>((j.d.pw - q + sw - 1) / sw, 0, phase);
    right[q] = std::clamp<int64_t>((j.d.pw + j.d.w - q + sw - 1) / sw, left[q], phase);
  }
  // Rows inside the image, [in0, in1) of the band: their padding cells, cell by
  // cell down all rows (a few cells a row: a loop per row cost more than the stores),
  // or row by row for a longer run.
  int64_t in0 = std::clamp(ph, r0, r1) - r0, in1 = std::clamp(ph + h, r0, r1) - r0;
  auto zeroDown = [&](int64_t at) {
    for (int64_t c = 0; c < j.cg; ++c) {
      float* cell = band + c * channelFloats + at;
      for (int64_t i = in0; i < in1; ++i) cell[i * row] = 0.0f;
    }
  };
  for (int64_t q = 0; q < sw; ++q) {
    for (int64_t e = 0; e < left[q]; ++e) zeroDown(q * phase + e);
    // A run of more than a few cells (the end of a phase rounded up to whole
    // vectors) is cleared row by row with vector stores: cell by cell, the 15
    // cells model_bench's pair has there took a fifth of its time.
    if (phase - right[q] > 4) {
      for (int64_t c = 0; c < j.cg; ++c)
        for (int64_t i = in0; i < in1; ++i) zeroFloats(band + c * channelFloats + i * row + q * phase + right[q], phase - right[q]);
    } else {
      for (int64_t e = right[q]; e < phase; ++e) zeroDown(q * phase + e);
    }
  }
  for (int64_t c = 0; c < j.cg; ++c) {
    float* rows = band + c * channelFloats;
    std::memset(rows, 0, sizeof(float) * static_cast<size_t>(in0 * row));
    std::memset(rows + in1 * row, 0, sizeof(float) * static_cast<size_t>((r1 - r0 - in1) * row));
  }
  int64_t y0 = std::max<int64_t>(0, r0 - ph), y1 = std::min(h, r1 - ph);
  if (y0 >= y1) return;
  int64_t s0 = y0 * a.stripsPerRow, s1 = y1 * a.stripsPerRow;
  int64_t a0 = firstRow(a, s0), a1 = endRow(a, s1);
  float* input = scratch(1, static_cast<size_t>(a.cg * a.bandRows * a.p.row + kSlack));
  std::memset(input + a.cg * a.bandRows * a.p.row, 0, sizeof(float) * kSlack);
  copyRows(a.d, a.p, a.x + img * a.d.c * a.d.h * a.d.w, 0, a.cg, a0, a1, a.bandRows * a.p.row, input);
  RowOutput o{band, 0, channelFloats, ph - r0, j.d.pw, j.d.sw, j.p};
  runTiles<Split>(a, img, 0, s0, s1, input, a0, o);
}

// One task: a run of tiles (four strips each) of one image and group, over all
// its filters. The task first makes the padded rows its output rows read, of
// the group's channels, in a band of its own thread's: copied from the input,
// or computed by the producer of a chained pair. The band is made by the thread
// that reads it, while its rows are in its caches, and takes memory for a
// task's rows rather than for the whole image (the few rows that the windows of
// two tasks share are made by both).
template <bool ProducerSplit>
__attribute__((target("avx512f,avx512vl,fma"))) void rowTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const RowJob& j = *reinterpret_cast<const RowJob*>(ctx);
  int64_t strips = j.d.oh * j.stripsPerRow, channelFloats = j.bandRows * j.p.row;
  // Chained, the producer's own band takes slot 1.
  float* band = scratch(j.producer ? 3 : 1, static_cast<size_t>(j.cg * channelFloats + kSlack));
  std::memset(band + j.cg * channelFloats, 0, sizeof(float) * kSlack);
  for (int64_t t = begin; t < end; ++t) {
    int64_t img = t / (j.d.groups * j.tasksPerGroup), g = t / j.tasksPerGroup % j.d.groups;
    int64_t first = t % j.tasksPerGroup * j.tilesPerTask;
    int64_t s0 = first * kStrips, s1 = std::min(strips, std::min(j.tiles, first + j.tilesPerTask) * kStrips);
    int64_t r0 = firstRow(j, s0), r1 = endRow(j, s1);
    if (j.producer)
      produceRows<ProducerSplit>(j, img, r0, r1, channelFloats, band);
    else
      copyRows(j.d, j.p, j.x + img * j.d.c * j.d.h * j.d.w, g * j.cg, j.cg, r0, r1, channelFloats, band);
    runTiles<false>(j, img, g, s0, s1, band, r0, j.out);
  }
}

// The job for d, its tap offsets written to `taps` (k of them). `outputRows`:
// the output rows a band must serve (a producer's: as many as its consumer's
// band holds), or 0 for those of one of the job's own tasks.
RowJob rowJob(const Conv2dDims& d, const float* x, const float* filters, int64_t mpad, int64_t slice, float* out,
              const ConvPostOps& post, int32_t* taps, int64_t outputRows = 0) {
  PaddedLayout p = paddedLayout(d);
  int64_t cg = d.c / d.groups, og = d.o / d.groups, k = cg * d.kh * d.kw, pixels = d.oh * d.ow;
  int64_t stripsPerRow = (d.ow + kStripLanes - 1) / kStripLanes;
  int64_t tiles = (d.oh * stripsPerRow + kStrips - 1) / kStrips;
  // A few tasks per thread in all, each a run of whole tiles of one image and group.
  int64_t wanted = std::max<int64_t>(1, 4 * device::currentThreads() / (d.n * d.groups));
  int64_t perTask = (tiles + std::min(tiles, wanted) - 1) / std::min(tiles, wanted);
  // A task's strips start anywhere in a row: they cover at most this many output rows.
  int64_t outRows = outputRows > 0 ? std::min(d.oh, outputRows)
                                   : std::min(d.oh, (perTask * kStrips + stripsPerRow - 1) / stripsPerRow + 1);
  int64_t bandRows = std::min(p.rows, (outRows - 1) * d.sh + (d.kh - 1) * d.dh + 1);
  for (int64_t c = 0, i = 0; c < cg; ++c)
    for (int64_t ky = 0; ky < d.kh; ++ky)
      for (int64_t kx = 0; kx < d.kw; ++kx, ++i)
        taps[i] = static_cast<int32_t>(c * bandRows * p.row + ky * d.dh * p.row + kx * d.dw % d.sw * p.phase +
                                       kx * d.dw / d.sw);
  return RowJob{d,           p,      x,     taps,    filters, RowOutput{out, d.o * pixels, pixels, 0, 0, 0, {}},
                k,           og,     cg,    mpad,    slice,   stripsPerRow,
                tiles,       perTask, (tiles + perTask - 1) / perTask, bandRows, post, nullptr};
}

}  // namespace

bool rowConvApplies(const Conv2dDims& d) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl")) return false;
  if (d.sw > 2 || d.groups < 1 || d.c % d.groups != 0 || d.o % d.groups != 0) return false;
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
  int64_t k = d.c / d.groups * d.kh * d.kw;
  // The tap offsets, shared by the tasks (the calling thread's scratch, slot 2).
  auto* taps = reinterpret_cast<int32_t*>(scratch(2, static_cast<size_t>(k)));
  RowJob job = rowJob(d, x, filters, mpad, slice, out, post, taps);
  device::parallelFor(d.n * d.groups * job.tasksPerGroup, d.n * d.o * d.oh * d.ow * k / 64, rowTask<false>,
                      reinterpret_cast<void* const*>(&job), nullptr);
}

bool rowChainApplies(const Conv2dDims& a, const Conv2dDims& b) {
  // A stride-2 consumer's producer stores runs of two strips (runTiles).
  int64_t strips = (a.ow + kStripLanes - 1) / kStripLanes;
  if (b.sw == 2 && strips % 2 != 0) return false;
  return a.groups == 1 && b.groups == 1 && a.n == b.n && a.o == b.c && a.oh == b.h && a.ow == b.w;
}

void rowConv2dChained(const RowConv& a, const RowConv& b, float* out) {
  int64_t ka = a.d.c * a.d.kh * a.d.kw, kb = b.d.c * b.d.kh * b.d.kw;
  auto* taps = reinterpret_cast<int32_t*>(scratch(2, static_cast<size_t>(ka + kb)));
  // The producer runs inside the consumer's tasks, on their rows: its input
  // band holds what one consumer band's worth of its output rows reads (a
  // consumer band's rows are padded rows of b: at most that many of a's).
  RowJob job = rowJob(b.d, nullptr, b.filters, b.mpad, b.slice, out, b.post, taps + ka);
  RowJob producer = rowJob(a.d, a.x, a.filters, a.mpad, a.slice, nullptr, a.post, taps, job.bandRows);
  job.producer = &producer;
  device::parallelFor(b.d.n * job.tasksPerGroup, b.d.n * (b.d.o * b.d.oh * b.d.ow * kb + a.d.o * a.d.oh * a.d.ow * ka) / 64,
                      b.d.sw == 2 ? rowTask<true> : rowTask<false>, reinterpret_cast<void* const*>(&job), nullptr);
}

}  // namespace kiln::jit::detail
