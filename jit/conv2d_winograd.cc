// 3x3 convolutions of stride 1 and 2 by minimal filtering (Winograd): per 2x2
// output tile and channel pair, 16 products (stride 1, F(2x2, 3x3)) or 25
// (stride 2, over the input's even and odd columns and rows) instead of 36.
//
// The arithmetic, along one axis (both axes apply it: a 2x2 tile takes A x A
// products per channel pair, A = 4 or 5 values an axis, each summed over the
// input channels: A x A matrix products [tiles x C] x [C x O]).
// Stride 1, F(2,3): two outputs from four inputs z0..z3,
//   input  v = (z0 - z2, z1 + z2, z2 - z1, z1 - z3)
//   filter u = (w0, (w0 + w1 + w2) / 2, (w0 - w1 + w2) / 2, w2)
//   output y0 = m0 + m1 + m2, y1 = m1 - m2 - m3, with m = u * v
// Stride 2: two outputs from five inputs, y0 = w0 z0 + w1 z1 + w2 z2 and
// y1 = w0 z2 + w1 z3 + w2 z4. The even inputs (z0, z2, z4) meet the outer taps
// (w0, w2) as a stride-1 filter of two taps, which F(2,2) computes with three
// products; the odd inputs meet the middle tap alone:
//   input  v = (z0 - z2, z2, z4 - z2, z1, z3)
//   filter u = (w0, w0 + w2, w2, w1, w1)
//   output y0 = m0 + m1 + m3, y1 = m1 + m2 + m4
// The input and output transforms only add and subtract, and the filters'
// halves are exact, so the sums round about as the direct ones do,
// reassociated. An infinite input can make a NaN where the direct sum gives an
// infinity (inf - inf in a transform), as in every Winograd convolution.
//
// Why: the direct row path (conv2d_rows.cc) runs near FP32 peak, as ONNX
// Runtime's convolutions do; with fewer products the same peak goes further.
//
// The schedule. A block is 64 tiles: four strips, each 16 neighbouring tiles
// of one tile row. Per block, per 64 output channels and 64 input channels:
// the input transform writes V[A*A][64 c][64 tiles] (its 16-tile vectors read
// the input's columns split in phases, so tile t's columns are lanes of A
// vectors); for each of the A*A positions, 4 x 64 register tiles (four output
// channels by 64 tiles: four loads, four broadcasts, sixteen FMAs a channel,
// as the row path's) accumulate M[A*A][64 o][64 tiles]; then the output
// transform adds M's positions into 2x2 tiles, applies the post-ops, and
// stores the output rows. V[position] (16 KB) stays in L1 while every output
// channel reads it.
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

namespace {

// Transformed values per axis and per tile, by stride.
template <int Stride>
constexpr int64_t kAxis = Stride == 2 ? 5 : 4;
template <int Stride>
constexpr int64_t kPositions = kAxis<Stride> * kAxis<Stride>;
static_assert(kPositions<1> == loop::winogradTileProducts(1) && kPositions<2> == loop::winogradTileProducts(2));
constexpr int64_t kStripTiles = 16;
constexpr int64_t kBlockStrips = 4;
constexpr int64_t kBlockTiles = kStripTiles * kBlockStrips;  // 64
constexpr int64_t kChannelChunk = 64;                        // input channels a V holds
constexpr int64_t kOutputChunk = 64;                         // output channels an M holds
constexpr int64_t kGroupRows = 4;                            // output channels a register tile covers
// One cache line between one position's rows of V or M and the next's. Without
// it positions lie a power of two of bytes apart (8 or 16 KB), so the input
// transform's 25 stores of a tile vector and the output transform's 25 loads
// fall in one set of the L1 (a 48 KB 12-way L1 has 4 KB a way) and evict each
// other. Padded, model_bench's stride-2 convolution took 141 us instead of
// 170 on one thread and 72 instead of 96 on two, kernel_bench's 64x56x56 375
// GFLOP/s instead of 327 (AVX-512 Zen 5); 32 or 48 floats were no better.
constexpr int64_t kPositionPad = 16;
// The header's tag: "W2S1" or "W2S2" (Winograd, 2x2 tiles, the stride), so
// that no other packing is taken for this one.
constexpr int64_t tagOf(int64_t stride) { return stride == 2 ? 0x57325332 : 0x57325331; }

// The 1D filter values from three taps (u above).
inline void filterAxis(int64_t stride, const float (&w)[3], float (&u)[5]) {
  if (stride == 2) {
    u[0] = w[0];
    u[1] = w[0] + w[2];
    u[2] = w[2];
    u[3] = u[4] = w[1];
  } else {
    u[0] = w[0];
    u[1] = 0.5f * (w[0] + w[1] + w[2]);
    u[2] = 0.5f * (w[0] - w[1] + w[2]);
    u[3] = w[2];
    u[4] = 0.0f;
  }
}

// Floats from one position of V or M to the next, for `rows` channels of 64
// tiles each.
constexpr int64_t positionStride(int64_t rows) { return rows * kBlockTiles + kPositionPad; }

struct WinogradJob {
  Conv2dDims d;
  const float* x;
  const float* u;  // U[A*A][groupsOf(o)][c][4]
  float* out;
  ConvPostOps post;
  int64_t groups;         // ceil(o / 4): register tiles' output-channel groups
  int64_t tilesX, tilesY, stripsX, blocks;  // tiles per output row and column, strips per tile row, blocks per image
};

// Which of the 80 columns [first, first + 80) of a row `width` wide lie inside
// it, five 16-lane masks; the same for every row and channel a strip reads.
struct StripColumns {
  int64_t first;
  __mmask16 inside[5];
};

__attribute__((target("avx512f"))) StripColumns stripColumns(int64_t first, int64_t width) {
  StripColumns sc{first, {}};
  for (int i = 0; i < 5; ++i) {
    int64_t lo = std::clamp<int64_t>(-(first + 16 * i), 0, 16), hi = std::clamp<int64_t>(width - (first + 16 * i), 0, 16);
    sc.inside[i] = lo < hi ? static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1)) : 0;
  }
  return sc;
}

// N vectors of a row's columns from sc.first on. Columns outside the row are
// neither read nor faulted on (masked loads, their address formed as an integer).
template <int N>
__attribute__((target("avx512f"), always_inline)) inline void loadStrip(const float* row, const StripColumns& sc,
                                                                      __m512 (&a)[N]) {
  uintptr_t at = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(sc.first * 4);
  for (int i = 0; i < N; ++i)
    a[i] = _mm512_maskz_loadu_ps(sc.inside[i], reinterpret_cast<const float*>(at + static_cast<uintptr_t>(64 * i)));
}

// A row's columns [first, first + 64] (zero outside it) split by phase: p[q]
// lane l holds column first + 4l + q, p[4] lane l column first + 4(l + 1): the
// five columns of 16 tiles' windows.
__attribute__((target("avx512f"), always_inline)) inline void phaseColumns(const float* row, const StripColumns& sc,
                                                                         __m512 (&p)[5]) {
  __m512 a[5];
  loadStrip(row, sc, a);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  __m512 e01 = _mm512_permutex2var_ps(a[0], evens, a[1]), o01 = _mm512_permutex2var_ps(a[0], odds, a[1]);
  __m512 e23 = _mm512_permutex2var_ps(a[2], evens, a[3]), o23 = _mm512_permutex2var_ps(a[2], odds, a[3]);
  p[0] = _mm512_permutex2var_ps(e01, evens, e23);
  p[2] = _mm512_permutex2var_ps(e01, odds, e23);
  p[1] = _mm512_permutex2var_ps(o01, evens, o23);
  p[3] = _mm512_permutex2var_ps(o01, odds, o23);
  p[4] = _mm512_permutex2var_ps(p[0], next, a[4]);
}

// Stride 1: a row's columns [first, first + 34) split in two phases, p[0]
// lane l column first + 2l, p[1] first + 2l + 1, p[2] first + 2(l + 1), p[3]
// first + 2(l + 1) + 1: the four columns of 16 tiles' windows.
__attribute__((target("avx512f"), always_inline)) inline void pairColumns(const float* row, const StripColumns& sc,
                                                                        __m512 (&p)[4]) {
  __m512 a[3];
  loadStrip(row, sc, a);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i nextEven = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  const __m512i nextOdd = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
  p[0] = _mm512_permutex2var_ps(a[0], evens, a[1]);
  p[1] = _mm512_permutex2var_ps(a[0], odds, a[1]);
  p[2] = _mm512_permutex2var_ps(p[0], nextEven, a[2]);
  p[3] = _mm512_permutex2var_ps(p[1], nextOdd, a[2]);
}

// One window row's column transform for 16 tiles: t[j] = v_j of the row (the
// first kAxis of them).
template <int Stride>
__attribute__((target("avx512f"), always_inline)) inline void columnTransform(const float* row, const StripColumns& sc,
                                                                            __m512 (&t)[5]) {
  if (!row) {
    for (auto& v : t) v = _mm512_setzero_ps();
    return;
  }
  if constexpr (Stride == 2) {
    __m512 p[5];
    phaseColumns(row, sc, p);
    t[0] = _mm512_sub_ps(p[0], p[2]);
    t[1] = p[2];
    t[2] = _mm512_sub_ps(p[4], p[2]);
    t[3] = p[1];
    t[4] = p[3];
  } else {
    __m512 p[4];
    pairColumns(row, sc, p);
    t[0] = _mm512_sub_ps(p[0], p[2]);
    t[1] = _mm512_add_ps(p[1], p[2]);
    t[2] = _mm512_sub_ps(p[2], p[1]);
    t[3] = _mm512_sub_ps(p[1], p[3]);
    t[4] = _mm512_setzero_ps();
  }
}

// Position p of a transformed tile vector, `pos` floats between positions.
__attribute__((target("avx512f"), always_inline)) inline void storePosition(float* to, int64_t pos, int64_t p, __m512 x) {
  _mm512_store_ps(to + p * pos, x);
}

// V[pos][c - c0][s * 16 + l] for input channels [c0, c0 + cs) and the block's
// four strips: window row i of tile row ty is input row 2 Stride ty - ph + i.
template <int Stride>
__attribute__((target("avx512f"))) void inputTransform(const WinogradJob& j, const float* image, int64_t block,
                                                       int64_t c0, int64_t cs, float* v) {
  constexpr int64_t A = kAxis<Stride>;
  const int64_t h = j.d.h, w = j.d.w, plane = h * w;
  for (int64_t s = 0; s < kBlockStrips; ++s) {
    int64_t strip = block * kBlockStrips + s, ty = strip / j.stripsX, tx0 = strip % j.stripsX * kStripTiles;
    int64_t firstRow = 2 * Stride * ty - j.d.ph;
    const StripColumns sc = stripColumns(2 * Stride * tx0 - j.d.pw, w);
    for (int64_t c = 0; c < cs; ++c) {
      const float* ch = image + (c0 + c) * plane;
      auto row = [&](int64_t i) -> const float* {
        int64_t iy = firstRow + i;
        return iy >= 0 && iy < h ? ch + iy * w : nullptr;
      };
      float* to = v + c * kBlockTiles + s * kStripTiles;
      const int64_t pos = positionStride(cs);  // floats between positions
      // The row transform over the column transforms: position (i', j') at to + (A i' + j') * pos.
      __m512 t[5];
      if constexpr (Stride == 2) {
        __m512 mid[5];
        columnTransform<2>(row(2), sc, mid);
        columnTransform<2>(row(0), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 0 * A + k, _mm512_sub_ps(t[k], mid[k]));
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 1 * A + k, mid[k]);
        columnTransform<2>(row(4), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 2 * A + k, _mm512_sub_ps(t[k], mid[k]));
        columnTransform<2>(row(1), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 3 * A + k, t[k]);
        columnTransform<2>(row(3), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 4 * A + k, t[k]);
      } else {
        __m512 r1[5], r2[5];
        columnTransform<1>(row(1), sc, r1);
        columnTransform<1>(row(2), sc, r2);
        for (int k = 0; k < 4; ++k) {
          storePosition(to, pos, 1 * A + k, _mm512_add_ps(r1[k], r2[k]));
          storePosition(to, pos, 2 * A + k, _mm512_sub_ps(r2[k], r1[k]));
        }
        columnTransform<1>(row(0), sc, t);
        for (int k = 0; k < 4; ++k) storePosition(to, pos, 0 * A + k, _mm512_sub_ps(t[k], r2[k]));
        columnTransform<1>(row(3), sc, t);
        for (int k = 0; k < 4; ++k) storePosition(to, pos, 3 * A + k, _mm512_sub_ps(r1[k], t[k]));
      }
    }
  }
}

// m[r][0..64) (+)= sum over c < cs of u[c][r] * v[c][0..64), for r < 4: the
// four output channels of one group, rows 64 floats apart.
template <bool Accumulate>
__attribute__((target("avx512f,fma"), always_inline)) inline void product(const float* v, const float* u, int64_t cs,
                                                                         float* m) {
  __m512 acc[kGroupRows][kBlockStrips];
#pragma GCC unroll 4
  for (auto& r : acc)
#pragma GCC unroll 4
    for (auto& a : r) a = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t c = 0; c < cs; ++c, v += kBlockTiles, u += kGroupRows) {
    __m512 b[kBlockStrips] = {_mm512_load_ps(v), _mm512_load_ps(v + 16), _mm512_load_ps(v + 32), _mm512_load_ps(v + 48)};
#pragma GCC unroll 4
    for (int r = 0; r < kGroupRows; ++r) {
      __m512 x = _mm512_set1_ps(u[r]);
#pragma GCC unroll 4
      for (int s = 0; s < kBlockStrips; ++s) acc[r][s] = _mm512_fmadd_ps(x, b[s], acc[r][s]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kGroupRows; ++r)
#pragma GCC unroll 4
    for (int s = 0; s < kBlockStrips; ++s) {
      float* at = m + r * kBlockTiles + s * kStripTiles;
      _mm512_store_ps(at, Accumulate ? _mm512_add_ps(acc[r][s], _mm512_load_ps(at)) : acc[r][s]);
    }
}

// The output transform of one axis: (y0, y1) from its kAxis values.
template <int Stride>
__attribute__((target("avx512f"), always_inline)) inline void outputAxis(const __m512 (&x)[5], __m512& y0, __m512& y1) {
  if constexpr (Stride == 2) {  // y0 = m0 + m1 + m3, y1 = m1 + m2 + m4
    y0 = _mm512_add_ps(_mm512_add_ps(x[0], x[1]), x[3]);
    y1 = _mm512_add_ps(_mm512_add_ps(x[1], x[2]), x[4]);
  } else {  // y0 = m0 + m1 + m2, y1 = m1 - m2 - m3
    y0 = _mm512_add_ps(_mm512_add_ps(x[0], x[1]), x[2]);
    y1 = _mm512_sub_ps(_mm512_sub_ps(x[1], x[2]), x[3]);
  }
}

// Output channels [o0, o0 + os) of the block from M[pos][o - o0][64 tiles]:
// the 2x2 tiles, the post-ops, stored where they fall inside the output.
template <int Stride>
__attribute__((target("avx512f"))) void outputTransform(const WinogradJob& j, int64_t img, int64_t block, int64_t o0,
                                                        int64_t os, const float* m, int64_t mRows) {
  constexpr int64_t A = kAxis<Stride>;
  const int64_t oh = j.d.oh, ow = j.d.ow, pos = positionStride(mRows);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t s = 0; s < kBlockStrips; ++s) {
    int64_t strip = block * kBlockStrips + s, ty = strip / j.stripsX, tx0 = strip % j.stripsX * kStripTiles;
    if (ty >= j.tilesY) break;  // the image's last block may end early
    int64_t oy = 2 * ty, ox = 2 * tx0;
    int64_t cols = std::min<int64_t>(32, ow - ox);
    __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
    __mmask16 m1 = static_cast<__mmask16>(cols >= 32 ? 0xFFFF : cols > 16 ? (1u << (cols - 16)) - 1 : 0);
    bool second = oy + 1 < oh;
    for (int64_t o = 0; o < os; ++o) {
      const float* at = m + o * kBlockTiles + s * kStripTiles;
      // Columns first: r[b][i] for output column b of the tile and window row i.
      __m512 r[2][5];
      for (int64_t i = 0; i < A; ++i) {
        __m512 x[5];
        for (int64_t k = 0; k < A; ++k) x[k] = _mm512_load_ps(at + (i * A + k) * pos);
        if constexpr (A == 4) x[4] = zero;
        outputAxis<Stride>(x, r[0][i], r[1][i]);
      }
      if constexpr (A == 4) r[0][4] = r[1][4] = zero;
      __m512 y[2][2];  // y[a][b]: output row a, column b of the tile
      outputAxis<Stride>(r[0], y[0][0], y[1][0]);
      outputAxis<Stride>(r[1], y[0][1], y[1][1]);
      __m512 add = j.post.bias ? _mm512_set1_ps(j.post.bias[o0 + o]) : zero;
      float* plane = j.out + (img * j.d.o + o0 + o) * oh * ow;
      for (int a = 0; a < 2; ++a) {
        if (a == 1 && !second) break;
        __m512 y0 = _mm512_add_ps(y[a][0], add), y1 = _mm512_add_ps(y[a][1], add);
        if (j.post.relu) {  // as nn.relu: v <= 0 becomes +0, NaN stays
          y0 = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y0, zero, _CMP_LE_OQ), y0, zero);
          y1 = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y1, zero, _CMP_LE_OQ), y1, zero);
        }
        float* row = plane + (oy + a) * ow + ox;
        _mm512_mask_storeu_ps(row, m0, _mm512_permutex2var_ps(y0, lo, y1));
        _mm512_mask_storeu_ps(row + 16, m1, _mm512_permutex2var_ps(y0, hi, y1));
      }
    }
  }
}

// Tasks are blocks, image by image.
template <int Stride>
__attribute__((target("avx512f,fma"))) void winogradTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  constexpr int64_t kPositions = kiln::jit::kPositions<Stride>;
  const WinogradJob& j = *reinterpret_cast<const WinogradJob*>(ctx);
  const int64_t c = j.d.c, o = j.d.o;
  const int64_t cs = std::min(c, kChannelChunk), osMax = std::min(j.groups * kGroupRows, kOutputChunk);
  float* v = detail::scratch(1, static_cast<size_t>(kPositions * positionStride(cs)));
  float* m = detail::scratch(2, static_cast<size_t>(kPositions * positionStride(osMax)));
  for (int64_t t = begin; t < end; ++t) {
    int64_t img = t / j.blocks, block = t % j.blocks;
    const float* image = j.x + img * c * j.d.h * j.d.w;
    for (int64_t o0 = 0; o0 < o; o0 += kOutputChunk) {
      int64_t os = std::min(kOutputChunk, o - o0), g0 = o0 / kGroupRows, gs = (os + kGroupRows - 1) / kGroupRows;
      for (int64_t c0 = 0; c0 < c; c0 += kChannelChunk) {
        int64_t cc = std::min(kChannelChunk, c - c0);
        inputTransform<Stride>(j, image, block, c0, cc, v);
        for (int64_t p = 0; p < kPositions; ++p) {
          const float* vp = v + p * positionStride(cc);
          float* mp = m + p * positionStride(gs * kGroupRows);
          for (int64_t g = 0; g < gs; ++g) {
            const float* u = j.u + ((p * j.groups + g0 + g) * c + c0) * kGroupRows;
            float* mg = mp + g * kGroupRows * kBlockTiles;
            if (c0 == 0) product<false>(vp, u, cc, mg);
            else product<true>(vp, u, cc, mg);
          }
        }
      }
      outputTransform<Stride>(j, img, block, o0, os, m, gs * kGroupRows);
    }
  }
}

// ceil(o / 4) groups of four output channels.
int64_t filterGroups(int64_t o) { return (o + kGroupRows - 1) / kGroupRows; }

}  // namespace

int64_t winogradFilterFloats(int64_t o, int64_t c, int64_t stride) {
  if (o <= 0 || c <= 0 || (stride != 1 && stride != 2)) return -1;
  int64_t groups = filterGroups(o), floats = 0;
  int64_t positions = stride == 2 ? kPositions<2> : kPositions<1>;
  if (__builtin_mul_overflow(groups * kGroupRows, c, &floats) || __builtin_mul_overflow(floats, positions, &floats) ||
      floats > INT64_MAX / 4 - kPackedHeaderFloats)
    return -1;
  return kPackedHeaderFloats + floats;
}

namespace {

struct FilterJob {
  const float* w;
  int64_t o, c, stride;
  float* u;  // past the header
};

// Groups [begin, end) of four filters, channel by channel, so that each
// position's four values land next to the last channel's: a stream per
// position, not a scatter.
void transformFilters(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const FilterJob& j = *reinterpret_cast<const FilterJob*>(ctx);
  const int64_t groups = filterGroups(j.o), axis = j.stride == 2 ? kAxis<2> : kAxis<1>, positions = axis * axis;
  for (int64_t g = begin; g < end; ++g)
    for (int64_t ch = 0; ch < j.c; ++ch) {
      float values[25][kGroupRows] = {};
      for (int64_t r = 0; r < kGroupRows && g * kGroupRows + r < j.o; ++r) {
        const float* f = j.w + ((g * kGroupRows + r) * j.c + ch) * 9;
        // Along the columns first, row by row: a[ky][j'].
        float a[3][5];
        for (int ky = 0; ky < 3; ++ky) filterAxis(j.stride, {f[ky * 3], f[ky * 3 + 1], f[ky * 3 + 2]}, a[ky]);
        for (int64_t jx = 0; jx < axis; ++jx) {
          float col[5];
          filterAxis(j.stride, {a[0][jx], a[1][jx], a[2][jx]}, col);
          for (int64_t iy = 0; iy < axis; ++iy) values[iy * axis + jx][r] = col[iy];
        }
      }
      for (int64_t p = 0; p < positions; ++p)
        std::memcpy(j.u + ((p * groups + g) * j.c + ch) * kGroupRows, values[p], sizeof values[p]);
    }
}

}  // namespace

void packWinogradFilter(const float* w, int64_t o, int64_t c, int64_t stride, float* out) {
  int64_t header[3] = {tagOf(stride), o, c};
  std::memset(out, 0, sizeof(float) * kPackedHeaderFloats);
  std::memcpy(out, header, sizeof header);
  FilterJob job{w, o, c, stride, out + kPackedHeaderFloats};
  // Shared out over the pool: filters transformed per call are on the call's path.
  device::parallelFor(filterGroups(o), o * c * 64, transformFilters, reinterpret_cast<void* const*>(&job), nullptr);
}

const float* winogradFilters(const float* packed, int64_t o, int64_t c, int64_t stride) {
  if (!packed) return nullptr;
  int64_t header[3];
  std::memcpy(header, packed, sizeof header);
  return header[0] == tagOf(stride) && header[1] == o && header[2] == c ? packed + kPackedHeaderFloats : nullptr;
}

namespace detail {

bool winogradApplies(const Conv2dDims& d) {
  if (!__builtin_cpu_supports("avx512f")) return false;
  if (d.kh != 3 || d.kw != 3 || loop::winogradStride(d.sh, d.sw, d.dh, d.dw, d.groups) == 0) return false;
  if (d.n < 1 || d.oh < 1 || d.ow < 1 || d.ph < 0 || d.pw < 0) return false;
  // The transforms cost per input channel and tile, the products per channel
  // pair: with 8 input channels the direct path was 12-14% faster (stride 2,
  // 64x64 images, 16 and 64 filters), with 16 this one 7-14%; 8 filters of 32
  // channels, 9%.
  if (!loop::winogradChannelsPay(d.c, d.o)) return false;
  // Strips never cross tile rows: a tile row of ceil(ow / 2) tiles takes
  // ceil(tiles / 16) strips; at least 80% of their lanes used, as the row path asks.
  int64_t tilesX = (d.ow + 1) / 2, strips = (tilesX + kStripTiles - 1) / kStripTiles;
  if (tilesX * 5 < strips * kStripTiles * 4) return false;
  // Window columns and rows as the transforms address them, with room for a
  // strip's 80 columns.
  if (d.w > INT32_MAX - 128 || d.pw > INT32_MAX / 4 || d.ph > INT32_MAX / 4 || d.ow > INT32_MAX / 4 ||
      d.oh > INT32_MAX / 4 || d.h > INT32_MAX)
    return false;
  int64_t plane = 0, images = 0;
  return !__builtin_mul_overflow(d.h, d.w, &plane) && !__builtin_mul_overflow(plane, d.c, &images);
}

void winogradConv2d(const Conv2dDims& d, const float* x, const float* u, float* out, const ConvPostOps& post) {
  WinogradJob job{d, x, u, out, post, filterGroups(d.o), (d.ow + 1) / 2, (d.oh + 1) / 2, 0, 0};
  job.stripsX = (job.tilesX + kStripTiles - 1) / kStripTiles;
  job.blocks = (job.tilesY * job.stripsX + kBlockStrips - 1) / kBlockStrips;
  // The work of the direct form (what device::grainFlags was measured against), saturated.
  int64_t work = d.n;
  for (int64_t f : {d.o, d.oh, d.ow, d.c, int64_t(9)})
    if (__builtin_mul_overflow(work, f, &work)) work = INT64_MAX;
  device::parallelFor(d.n * job.blocks, work / 64, d.sh == 2 ? winogradTask<2> : winogradTask<1>,
                      reinterpret_cast<void* const*>(&job), nullptr);
}

}  // namespace detail

}  // namespace kiln::jit
