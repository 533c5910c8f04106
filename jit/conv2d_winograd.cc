// 3x3 convolutions of stride 1 and 2 by minimal filtering (Winograd): per 2x2
// output tile and channel pair, 16 products (stride 1, F(2x2, 3x3)) or 25
// (stride 2, over the input's even and odd columns and rows) instead of 36; at
// stride 1, per 4x4 tile, 36 (F(4x4, 3x3)) instead of 144.
//
// The arithmetic, along one axis (both axes apply it: a tile takes A x A
// products per channel pair, A = 4, 5 or 6 values an axis, each summed over the
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
// Stride 1, F(4,3) (Lavin and Gray's points 0, +-1, +-2): four outputs from six inputs,
//   input  v = (4z0 - 5z2 + z4, -4z1 - 4z2 + z3 + z4, 4z1 - 4z2 - z3 + z4,
//               -2z1 - z2 + 2z3 + z4, 2z1 - z2 - 2z3 + z4, 4z1 - 5z3 + z5)
//   filter u = (w0 / 4, -(w0 + w1 + w2) / 6, -(w0 - w1 + w2) / 6,
//               w0 / 24 + w1 / 12 + w2 / 6, w0 / 24 - w1 / 12 + w2 / 6, w2)
//   output y0 = m0 + m1 + m2 + m3 + m4, y1 = m1 - m2 + 2 (m3 - m4),
//          y2 = m1 + m2 + 4 (m3 + m4), y3 = m1 - m2 + 8 (m3 - m4) + m5
// The 2x2 forms' input and output transforms only add and subtract, and their
// filters' halves are exact, so the sums round about as the direct ones do,
// reassociated (their largest error over the sum of the terms' magnitudes:
// 1.3e-7 at stride 1, 2.5e-7 at stride 2, conv_winograd_test). F(4,3)'s
// transforms scale by up to 8 and its filters by inexact sixths: 2.0e-6 there,
// and each input reaches the whole 4x4 tile, so a NaN spreads to outputs whose
// windows never read it. So the default takes the 2x2 forms, whose NaNs reach
// exactly the outputs the definition's do, and a schedule's winograd=4 this one,
// where a tuner measured it faster (1.6x on kernel_bench's 64x56x56 convolution,
// two Zen 4 threads). An infinite input can make a NaN where the direct sum gives
// an infinity (inf - inf in a transform), as in every Winograd convolution.
//
// Why: the direct row path (conv2d_rows.cc) runs near FP32 peak, as ONNX
// Runtime's convolutions do; with fewer products the same peak goes further.
//
// The schedule. A block is four strips (two for F(4,3)), each 16 neighbouring
// tiles of one tile row. Per block, per 64 output channels and 64 input
// channels: the input transform writes V[A*A][64 c][block tiles] (its 16-tile
// vectors read the input's columns split in phases, so tile t's columns are
// lanes of A vectors); for each of the A*A positions, register tiles of four
// output channels by 64 tiles (eight by 32 for F(4,3): two loads, eight
// broadcasts and sixteen FMAs a channel) accumulate M[A*A][64 o][block tiles];
// then the output transform adds M's positions into tiles, applies the
// post-ops, and stores the output rows. V[position] (16 KB; 8 for F(4,3)) stays
// in L1 while every output channel reads it; V and M together (512 KB; 576 for
// F(4,3), which would take 1.1 MB with four strips) stay in a 1 MB L2.
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

// A form's constants (loop::winogradForm): its stride, output tile side,
// transformed values per axis, strips a block, and four-filter groups a
// register tile covers.
template <int Form>
constexpr int64_t kStride = loop::winogradFormStride(Form);
template <int Form>
constexpr int64_t kTile = loop::winogradFormTile(Form);
constexpr int64_t axisOf(int64_t form) { return form == 2 ? 5 : form == loop::kWinogradF4 ? 6 : 4; }
constexpr int64_t blockStripsOf(int64_t form) { return form == loop::kWinogradF4 ? 2 : 4; }
template <int Form>
constexpr int64_t kAxis = axisOf(Form);
template <int Form>
constexpr int64_t kPositions = kAxis<Form> * kAxis<Form>;
static_assert(kPositions<1> == loop::winogradTileProducts(1) && kPositions<2> == loop::winogradTileProducts(2) &&
              kPositions<3> == loop::winogradTileProducts(loop::kWinogradF4));
constexpr int64_t kStripTiles = 16;
template <int Form>
constexpr int64_t kBlockStrips = blockStripsOf(Form);
template <int Form>
constexpr int64_t kBlockTiles = kStripTiles * kBlockStrips<Form>;  // 64, or 32 for F(4,3)
template <int Form>
constexpr int kTileGroups = Form == loop::kWinogradF4 ? 2 : 1;
constexpr int64_t kChannelChunk = 64;  // input channels a V holds
constexpr int64_t kOutputChunk = 64;   // output channels an M holds
constexpr int64_t kGroupRows = 4;      // output channels a filter group holds
constexpr int64_t kMostAxis = 6;
// One cache line between one position's rows of V or M and the next's. Without
// it positions lie a power of two of bytes apart (8 or 16 KB), so the input
// transform's 25 stores of a tile vector and the output transform's 25 loads
// fall in one set of the L1 (a 48 KB 12-way L1 has 4 KB a way) and evict each
// other. Padded, model_bench's stride-2 convolution took 141 us instead of
// 170 on one thread and 72 instead of 96 on two, kernel_bench's 64x56x56 375
// GFLOP/s instead of 327 (AVX-512 Zen 5); 32 or 48 floats were no better.
constexpr int64_t kPositionPad = 16;
// The header's tag: "W2S1", "W2S2" or "W4S1" (Winograd, the tile side, the
// stride), so that no other packing is taken for this one.
constexpr int64_t tagOf(int64_t form) {
  return form == loop::kWinogradF4 ? 0x57345331 : form == 2 ? 0x57325332 : 0x57325331;
}

// The 1D filter values from three taps (u above): of floats, or of vectors of
// them lane by lane (the same operations, so the same roundings).
template <class T>
__attribute__((always_inline)) inline void filterAxis(int64_t form, const T (&w)[3], T (&u)[kMostAxis]) {
  if (form == 2) {
    u[0] = w[0];
    u[1] = w[0] + w[2];
    u[2] = w[2];
    u[3] = u[4] = w[1];
    u[5] = T{};
  } else if (form == loop::kWinogradF4) {
    // By reciprocals, not divisions: 64 x 64 filters transformed per call (as
    // kernel_bench's convolution, whose filters are an input, does) took 160 us
    // instead of 169 on two Zen 4 threads, 294 instead of 314 on one.
    constexpr float sixth = 1.0f / 6.0f, twelfth = 1.0f / 12.0f, twentyFourth = 1.0f / 24.0f;
    T outer = w[0] + w[2], even = w[0] * twentyFourth + w[2] * sixth, odd = w[1] * twelfth;
    u[0] = w[0] * 0.25f;
    u[1] = -(outer + w[1]) * sixth;
    u[2] = -(outer - w[1]) * sixth;
    u[3] = even + odd;
    u[4] = even - odd;
    u[5] = w[2];
  } else {
    u[0] = w[0];
    u[1] = 0.5f * (w[0] + w[1] + w[2]);
    u[2] = 0.5f * (w[0] - w[1] + w[2]);
    u[3] = w[2];
    u[4] = u[5] = T{};
  }
}

// Floats from one position of V or M to the next, for `rows` channels of a block's tiles each.
template <int Form>
constexpr int64_t positionStride(int64_t rows) {
  return rows * kBlockTiles<Form> + kPositionPad;
}

struct WinogradJob {
  Conv2dDims d;
  const float* x;
  const float* u;  // U[A*A][groupsOf(o)][c][4]
  float* out;
  ConvPostOps post;
  int64_t groups;         // ceil(o / 4): filter groups
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

// A row's columns [first, first + 66) (zero outside it) split by phase: p[q]
// lane l holds column first + 4l + q, p[4] lane l column first + 4(l + 1), p[5]
// first + 4(l + 1) + 1: the five columns of 16 stride-2 tiles' windows, or the
// six of 16 4x4 tiles'.
__attribute__((target("avx512f"), always_inline)) inline void phaseColumns(const float* row, const StripColumns& sc,
                                                                         __m512 (&p)[kMostAxis], bool six) {
  __m512 a[5];
  loadStrip(row, sc, a);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  const __m512i nextOdd = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
  __m512 e01 = _mm512_permutex2var_ps(a[0], evens, a[1]), o01 = _mm512_permutex2var_ps(a[0], odds, a[1]);
  __m512 e23 = _mm512_permutex2var_ps(a[2], evens, a[3]), o23 = _mm512_permutex2var_ps(a[2], odds, a[3]);
  p[0] = _mm512_permutex2var_ps(e01, evens, e23);
  p[2] = _mm512_permutex2var_ps(e01, odds, e23);
  p[1] = _mm512_permutex2var_ps(o01, evens, o23);
  p[3] = _mm512_permutex2var_ps(o01, odds, o23);
  p[4] = _mm512_permutex2var_ps(p[0], next, a[4]);
  if (six) p[5] = _mm512_permutex2var_ps(p[1], nextOdd, a[4]);
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

// F(4,3)'s input transform along one axis (v above).
__attribute__((target("avx512f"), always_inline)) inline void inputAxis4(const __m512 (&z)[kMostAxis],
                                                                       __m512 (&v)[kMostAxis]) {
  const __m512 two = _mm512_set1_ps(2.0f), four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f);
  __m512 a = _mm512_fnmadd_ps(four, z[2], z[4]);  // z4 - 4 z2
  __m512 b = _mm512_fnmadd_ps(four, z[1], z[3]);  // z3 - 4 z1
  __m512 c = _mm512_sub_ps(z[4], z[2]);
  __m512 e = _mm512_mul_ps(two, _mm512_sub_ps(z[3], z[1]));
  v[0] = _mm512_fmadd_ps(four, z[0], _mm512_fnmadd_ps(five, z[2], z[4]));
  v[1] = _mm512_add_ps(b, a);
  v[2] = _mm512_sub_ps(a, b);
  v[3] = _mm512_add_ps(c, e);
  v[4] = _mm512_sub_ps(c, e);
  v[5] = _mm512_fmadd_ps(four, z[1], _mm512_fnmadd_ps(five, z[3], z[5]));
}

// One window row's column transform for 16 tiles: t[j] = v_j of the row (the
// first kAxis of them).
template <int Form>
__attribute__((target("avx512f"), always_inline)) inline void columnTransform(const float* row, const StripColumns& sc,
                                                                            __m512 (&t)[kMostAxis]) {
  if (!row) {
    for (auto& v : t) v = _mm512_setzero_ps();
    return;
  }
  if constexpr (Form == loop::kWinogradF4) {
    __m512 p[kMostAxis];
    phaseColumns(row, sc, p, true);
    inputAxis4(p, t);
  } else if constexpr (Form == 2) {
    __m512 p[kMostAxis];
    phaseColumns(row, sc, p, false);
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
  }
}

// Position p of a transformed tile vector, `pos` floats between positions.
__attribute__((target("avx512f"), always_inline)) inline void storePosition(float* to, int64_t pos, int64_t p, __m512 x) {
  _mm512_store_ps(to + p * pos, x);
}

// V[pos][c - c0][s * 16 + l] for input channels [c0, c0 + cs) and the block's
// strips: window row i of tile row ty is input row tile * stride * ty - ph + i.
template <int Form>
__attribute__((target("avx512f"))) void inputTransform(const WinogradJob& j, const float* image, int64_t block,
                                                       int64_t c0, int64_t cs, float* v) {
  constexpr int64_t A = kAxis<Form>, step = kTile<Form> * kStride<Form>;
  const int64_t h = j.d.h, w = j.d.w, plane = h * w;
  for (int64_t s = 0; s < kBlockStrips<Form>; ++s) {
    int64_t strip = block * kBlockStrips<Form> + s, ty = strip / j.stripsX, tx0 = strip % j.stripsX * kStripTiles;
    int64_t firstRow = step * ty - j.d.ph;
    const StripColumns sc = stripColumns(step * tx0 - j.d.pw, w);
    for (int64_t c = 0; c < cs; ++c) {
      const float* ch = image + (c0 + c) * plane;
      auto row = [&](int64_t i) -> const float* {
        int64_t iy = firstRow + i;
        return iy >= 0 && iy < h ? ch + iy * w : nullptr;
      };
      float* to = v + c * kBlockTiles<Form> + s * kStripTiles;
      const int64_t pos = positionStride<Form>(cs);  // floats between positions
      // The row transform over the column transforms: position (i', j') at to + (A i' + j') * pos.
      __m512 t[kMostAxis];
      if constexpr (Form == loop::kWinogradF4) {
        __m512 rows[kMostAxis][kMostAxis];
        for (int i = 0; i < 6; ++i) columnTransform<Form>(row(i), sc, rows[i]);
        for (int k = 0; k < 6; ++k) {
          __m512 z[kMostAxis] = {rows[0][k], rows[1][k], rows[2][k], rows[3][k], rows[4][k], rows[5][k]};
          inputAxis4(z, t);
          for (int i = 0; i < 6; ++i) storePosition(to, pos, i * A + k, t[i]);
        }
      } else if constexpr (Form == 2) {
        __m512 mid[kMostAxis];
        columnTransform<Form>(row(2), sc, mid);
        columnTransform<Form>(row(0), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 0 * A + k, _mm512_sub_ps(t[k], mid[k]));
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 1 * A + k, mid[k]);
        columnTransform<Form>(row(4), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 2 * A + k, _mm512_sub_ps(t[k], mid[k]));
        columnTransform<Form>(row(1), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 3 * A + k, t[k]);
        columnTransform<Form>(row(3), sc, t);
        for (int k = 0; k < 5; ++k) storePosition(to, pos, 4 * A + k, t[k]);
      } else {
        __m512 r1[kMostAxis], r2[kMostAxis];
        columnTransform<Form>(row(1), sc, r1);
        columnTransform<Form>(row(2), sc, r2);
        for (int k = 0; k < 4; ++k) {
          storePosition(to, pos, 1 * A + k, _mm512_add_ps(r1[k], r2[k]));
          storePosition(to, pos, 2 * A + k, _mm512_sub_ps(r2[k], r1[k]));
        }
        columnTransform<Form>(row(0), sc, t);
        for (int k = 0; k < 4; ++k) storePosition(to, pos, 0 * A + k, _mm512_sub_ps(t[k], r2[k]));
        columnTransform<Form>(row(3), sc, t);
        for (int k = 0; k < 4; ++k) storePosition(to, pos, 3 * A + k, _mm512_sub_ps(r1[k], t[k]));
      }
    }
  }
}

// m[r][0..Strips*16) (+)= sum over c < cs of u[c][r] * v[c][..], for r < 4 *
// Groups: the output channels of Groups filter groups (group g's values
// `groupFloats` past group 0's), rows Strips*16 floats apart.
template <bool Accumulate, int Strips, int Groups>
__attribute__((target("avx512f,fma"), always_inline)) inline void product(const float* v, const float* u,
                                                                         int64_t groupFloats, int64_t cs, float* m) {
  constexpr int Rows = kGroupRows * Groups, Tiles = Strips * kStripTiles;
  __m512 acc[Rows][Strips];
#pragma GCC unroll 8
  for (auto& r : acc)
#pragma GCC unroll 4
    for (auto& a : r) a = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t c = 0; c < cs; ++c, v += Tiles, u += kGroupRows) {
    __m512 b[Strips];
#pragma GCC unroll 4
    for (int s = 0; s < Strips; ++s) b[s] = _mm512_load_ps(v + s * kStripTiles);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      __m512 x = _mm512_set1_ps(u[r / kGroupRows * groupFloats + r % kGroupRows]);
#pragma GCC unroll 4
      for (int s = 0; s < Strips; ++s) acc[r][s] = _mm512_fmadd_ps(x, b[s], acc[r][s]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int s = 0; s < Strips; ++s) {
      float* at = m + r * Tiles + s * kStripTiles;
      _mm512_store_ps(at, Accumulate ? _mm512_add_ps(acc[r][s], _mm512_load_ps(at)) : acc[r][s]);
    }
}

// The output transform of one axis: y[0..tile) from its kAxis values.
template <int Form>
__attribute__((target("avx512f"), always_inline)) inline void outputAxis(const __m512 (&x)[kMostAxis], __m512 (&y)[4]) {
  if constexpr (Form == loop::kWinogradF4) {
    __m512 p = _mm512_add_ps(x[1], x[2]), q = _mm512_sub_ps(x[1], x[2]);
    __m512 r = _mm512_add_ps(x[3], x[4]), s = _mm512_sub_ps(x[3], x[4]);
    y[0] = _mm512_add_ps(_mm512_add_ps(x[0], p), r);
    y[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), s, q);
    y[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), r, p);
    y[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), s, q), x[5]);
  } else if constexpr (Form == 2) {  // y0 = m0 + m1 + m3, y1 = m1 + m2 + m4
    y[0] = _mm512_add_ps(_mm512_add_ps(x[0], x[1]), x[3]);
    y[1] = _mm512_add_ps(_mm512_add_ps(x[1], x[2]), x[4]);
  } else {  // y0 = m0 + m1 + m2, y1 = m1 - m2 - m3
    y[0] = _mm512_add_ps(_mm512_add_ps(x[0], x[1]), x[2]);
    y[1] = _mm512_sub_ps(_mm512_sub_ps(x[1], x[2]), x[3]);
  }
}

// A 16-lane mask of the first `n` lanes (none for n <= 0, all for n >= 16).
inline __mmask16 firstLanes(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : n > 0 ? (1u << n) - 1 : 0);
}

// Output channels [o0, o0 + os) of the block from M[pos][o - o0][block tiles]:
// the tiles, the post-ops, stored where they fall inside the output.
template <int Form>
__attribute__((target("avx512f"))) void outputTransform(const WinogradJob& j, int64_t img, int64_t block, int64_t o0,
                                                        int64_t os, const float* m, int64_t mRows) {
  constexpr int64_t A = kAxis<Form>, T = kTile<Form>;
  const int64_t oh = j.d.oh, ow = j.d.ow, pos = positionStride<Form>(mRows);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t s = 0; s < kBlockStrips<Form>; ++s) {
    int64_t strip = block * kBlockStrips<Form> + s, ty = strip / j.stripsX, tx0 = strip % j.stripsX * kStripTiles;
    if (ty >= j.tilesY) break;  // the image's last block may end early
    int64_t oy = T * ty, ox = T * tx0;
    int64_t cols = std::min<int64_t>(16 * T, ow - ox), rows = std::min<int64_t>(T, oh - oy);
    __mmask16 masks[T];
    for (int64_t k = 0; k < T; ++k) masks[k] = firstLanes(cols - 16 * k);
    for (int64_t o = 0; o < os; ++o) {
      const float* at = m + o * kBlockTiles<Form> + s * kStripTiles;
      // Columns first: r[b][i] for output column b of the tile and window row i.
      __m512 r[T][kMostAxis];
      for (int64_t i = 0; i < A; ++i) {
        __m512 x[kMostAxis], y[4];
        for (int64_t k = 0; k < A; ++k) x[k] = _mm512_load_ps(at + (i * A + k) * pos);
        for (int64_t k = A; k < kMostAxis; ++k) x[k] = zero;
        outputAxis<Form>(x, y);
        for (int64_t b = 0; b < T; ++b) r[b][i] = y[b];
      }
      for (int64_t b = 0; b < T; ++b)
        for (int64_t i = A; i < kMostAxis; ++i) r[b][i] = zero;
      __m512 y[T][4];  // y[b][a]: output column b, row a of the tile
      for (int64_t b = 0; b < T; ++b) outputAxis<Form>(r[b], y[b]);
      __m512 add = j.post.bias ? _mm512_set1_ps(j.post.bias[o0 + o]) : zero;
      float* plane = j.out + (img * j.d.o + o0 + o) * oh * ow;
      for (int64_t a = 0; a < rows; ++a) {
        __m512 c[T];
        for (int64_t b = 0; b < T; ++b) {
          c[b] = _mm512_add_ps(y[b][a], add);
          if (j.post.relu)  // as nn.relu: v <= 0 becomes +0, NaN stays
            c[b] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c[b], zero, _CMP_LE_OQ), c[b], zero);
        }
        float* row = plane + (oy + a) * ow + ox;
        // Lane l of column b's vector is output column ox + T l + b.
        if constexpr (T == 4) {
          __m512 e0 = _mm512_permutex2var_ps(c[0], lo, c[2]), e1 = _mm512_permutex2var_ps(c[0], hi, c[2]);
          __m512 f0 = _mm512_permutex2var_ps(c[1], lo, c[3]), f1 = _mm512_permutex2var_ps(c[1], hi, c[3]);
          _mm512_mask_storeu_ps(row, masks[0], _mm512_permutex2var_ps(e0, lo, f0));
          _mm512_mask_storeu_ps(row + 16, masks[1], _mm512_permutex2var_ps(e0, hi, f0));
          _mm512_mask_storeu_ps(row + 32, masks[2], _mm512_permutex2var_ps(e1, lo, f1));
          _mm512_mask_storeu_ps(row + 48, masks[3], _mm512_permutex2var_ps(e1, hi, f1));
        } else {
          _mm512_mask_storeu_ps(row, masks[0], _mm512_permutex2var_ps(c[0], lo, c[1]));
          _mm512_mask_storeu_ps(row + 16, masks[1], _mm512_permutex2var_ps(c[0], hi, c[1]));
        }
      }
    }
  }
}

// Tasks are blocks, image by image.
template <int Form>
__attribute__((target("avx512f,fma"))) void winogradTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  constexpr int64_t kPositions = kiln::jit::kPositions<Form>;
  constexpr int Groups = kTileGroups<Form>, Strips = static_cast<int>(kBlockStrips<Form>);
  const WinogradJob& j = *reinterpret_cast<const WinogradJob*>(ctx);
  const int64_t c = j.d.c, o = j.d.o;
  const int64_t cs = std::min(c, kChannelChunk), osMax = std::min(j.groups * kGroupRows, kOutputChunk);
  float* v = detail::scratch(1, static_cast<size_t>(kPositions * positionStride<Form>(cs)));
  float* m = detail::scratch(2, static_cast<size_t>(kPositions * positionStride<Form>(osMax)));
  const int64_t groupFloats = c * kGroupRows;  // from one filter group's values at a position to the next's
  for (int64_t t = begin; t < end; ++t) {
    int64_t img = t / j.blocks, block = t % j.blocks;
    const float* image = j.x + img * c * j.d.h * j.d.w;
    for (int64_t o0 = 0; o0 < o; o0 += kOutputChunk) {
      int64_t os = std::min(kOutputChunk, o - o0), g0 = o0 / kGroupRows, gs = (os + kGroupRows - 1) / kGroupRows;
      for (int64_t c0 = 0; c0 < c; c0 += kChannelChunk) {
        int64_t cc = std::min(kChannelChunk, c - c0);
        inputTransform<Form>(j, image, block, c0, cc, v);
        for (int64_t p = 0; p < kPositions; ++p) {
          const float* vp = v + p * positionStride<Form>(cc);
          float* mp = m + p * positionStride<Form>(gs * kGroupRows);
          auto u = [&](int64_t g) { return j.u + ((p * j.groups + g0 + g) * c + c0) * kGroupRows; };
          auto mg = [&](int64_t g) { return mp + g * kGroupRows * kBlockTiles<Form>; };
          int64_t g = 0;
          for (; g + Groups <= gs; g += Groups)
            if (c0 == 0) product<false, Strips, Groups>(vp, u(g), groupFloats, cc, mg(g));
            else product<true, Strips, Groups>(vp, u(g), groupFloats, cc, mg(g));
          if (g < gs) {  // an odd group left
            if (c0 == 0) product<false, Strips, 1>(vp, u(g), groupFloats, cc, mg(g));
            else product<true, Strips, 1>(vp, u(g), groupFloats, cc, mg(g));
          }
        }
      }
      outputTransform<Form>(j, img, block, o0, os, m, gs * kGroupRows);
    }
  }
}

// ceil(o / 4) groups of four output channels.
int64_t filterGroups(int64_t o) { return (o + kGroupRows - 1) / kGroupRows; }

}  // namespace

int64_t winogradFilterFloats(int64_t o, int64_t c, int64_t form) {
  if (o <= 0 || c <= 0 || !loop::isWinogradForm(form)) return -1;
  int64_t groups = filterGroups(o), floats = 0, positions = axisOf(form) * axisOf(form);
  if (__builtin_mul_overflow(groups * kGroupRows, c, &floats) || __builtin_mul_overflow(floats, positions, &floats) ||
      floats > INT64_MAX / 4 - kPackedHeaderFloats)
    return -1;
  return kPackedHeaderFloats + floats;
}

namespace {

struct FilterJob {
  const float* w;
  int64_t o, c, form;
  float* u;  // past the header
};

// Groups [begin, end) of four filters, four channels a vector: lane 4k + r
// holds filter 4g + r and channel ch + k, as U's rows of four lie, so that a
// position's 16 values are one store. Filters past o read as zero.
__attribute__((target("avx512f"))) void transformFilters512(const FilterJob& j, int64_t begin, int64_t end) {
  const int64_t groups = filterGroups(j.o), axis = axisOf(j.form);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i r = _mm512_and_si512(lane, _mm512_set1_epi32(3)), k = _mm512_srli_epi32(lane, 2);
  // Lane (k, r)'s first tap from filter 4g's channel ch: (r c + k) 9 floats on (c <= INT32_MAX / 64).
  const __m512i first = _mm512_mullo_epi32(
      _mm512_add_epi32(_mm512_mullo_epi32(r, _mm512_set1_epi32(static_cast<int32_t>(j.c))), k), _mm512_set1_epi32(9));
  for (int64_t g = begin; g < end; ++g) {
    __mmask16 filters = _mm512_cmplt_epi32_mask(r, _mm512_set1_epi32(static_cast<int32_t>(std::min<int64_t>(j.o - g * 4, 4))));
    for (int64_t ch = 0; ch < j.c; ch += 4) {
      __mmask16 channels = _mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(static_cast<int32_t>(std::min<int64_t>(j.c - ch, 4))));
      const float* base = j.w + (g * kGroupRows * j.c + ch) * 9;
      __m512 f[9];
      for (int t = 0; t < 9; ++t)
        f[t] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), filters & channels,
                                        _mm512_add_epi32(first, _mm512_set1_epi32(t)), base, 4);
      __m512 a[3][kMostAxis];
      for (int ky = 0; ky < 3; ++ky) filterAxis<__m512>(j.form, {f[ky * 3], f[ky * 3 + 1], f[ky * 3 + 2]}, a[ky]);
      for (int64_t jx = 0; jx < axis; ++jx) {
        __m512 col[kMostAxis];
        filterAxis<__m512>(j.form, {a[0][jx], a[1][jx], a[2][jx]}, col);
        for (int64_t iy = 0; iy < axis; ++iy)
          _mm512_mask_storeu_ps(j.u + (((iy * axis + jx) * groups + g) * j.c + ch) * kGroupRows, channels, col[iy]);
      }
    }
  }
}

// Groups [begin, end) of four filters, channel by channel, so that each
// position's four values land next to the last channel's: a stream per
// position, not a scatter. With AVX-512, sixteen values at once: 64 x 64
// filters transformed per call (kernel_bench's convolution) took 25 us instead
// of 66 for 2x2 tiles and 41 instead of 160 for 4x4 on two Zen 4 threads, 28
// instead of 104 and 49 instead of 294 on one.
void transformFilters(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const FilterJob& j = *reinterpret_cast<const FilterJob*>(ctx);
  if (__builtin_cpu_supports("avx512f") && j.c <= INT32_MAX / 64) return transformFilters512(j, begin, end);
  const int64_t groups = filterGroups(j.o), axis = axisOf(j.form), positions = axis * axis;
  for (int64_t g = begin; g < end; ++g)
    for (int64_t ch = 0; ch < j.c; ++ch) {
      float values[kMostAxis * kMostAxis][kGroupRows] = {};
      for (int64_t r = 0; r < kGroupRows && g * kGroupRows + r < j.o; ++r) {
        const float* f = j.w + ((g * kGroupRows + r) * j.c + ch) * 9;
        // Along the columns first, row by row: a[ky][j'].
        float a[3][kMostAxis];
        for (int ky = 0; ky < 3; ++ky) filterAxis<float>(j.form, {f[ky * 3], f[ky * 3 + 1], f[ky * 3 + 2]}, a[ky]);
        for (int64_t jx = 0; jx < axis; ++jx) {
          float col[kMostAxis];
          filterAxis<float>(j.form, {a[0][jx], a[1][jx], a[2][jx]}, col);
          for (int64_t iy = 0; iy < axis; ++iy) values[iy * axis + jx][r] = col[iy];
        }
      }
      for (int64_t p = 0; p < positions; ++p)
        std::memcpy(j.u + ((p * groups + g) * j.c + ch) * kGroupRows, values[p], sizeof values[p]);
    }
}

}  // namespace

void packWinogradFilter(const float* w, int64_t o, int64_t c, int64_t form, float* out) {
  int64_t header[3] = {tagOf(form), o, c};
  std::memset(out, 0, sizeof(float) * kPackedHeaderFloats);
  std::memcpy(out, header, sizeof header);
  FilterJob job{w, o, c, form, out + kPackedHeaderFloats};
  // Shared out over the pool: filters transformed per call are on the call's path.
  device::parallelFor(filterGroups(o), o * c * 64, transformFilters, reinterpret_cast<void* const*>(&job), nullptr);
}

const float* winogradFilters(const float* packed, int64_t o, int64_t c, int64_t form) {
  if (!packed) return nullptr;
  int64_t header[3];
  std::memcpy(header, packed, sizeof header);
  return header[0] == tagOf(form) && header[1] == o && header[2] == c ? packed + kPackedHeaderFloats : nullptr;
}

namespace detail {

bool winogradApplies(const Conv2dDims& d, int64_t form) {
  if (!__builtin_cpu_supports("avx512f") || !loop::isWinogradForm(form)) return false;
  if (d.kh != 3 || d.kw != 3 || loop::winogradStride(d.sh, d.sw, d.dh, d.dw, d.groups) != loop::winogradFormStride(form))
    return false;
  if (d.n < 1 || d.oh < 1 || d.ow < 1 || d.ph < 0 || d.pw < 0) return false;
  // The transforms cost per input channel and tile, the products per channel
  // pair: with 8 input channels the direct path was 12-14% faster (stride 2,
  // 64x64 images, 16 and 64 filters), with 16 this one 7-14%; 8 filters of 32
  // channels, 9%.
  if (!loop::winogradChannelsPay(d.c, d.o)) return false;
  // Strips never cross tile rows: a tile row of ceil(ow / tile) tiles takes
  // ceil(tiles / 16) strips; at least 80% of their lanes used, as the row path asks.
  int64_t tile = loop::winogradFormTile(form);
  int64_t tilesX = (d.ow + tile - 1) / tile, strips = (tilesX + kStripTiles - 1) / kStripTiles;
  if (tilesX * 5 < strips * kStripTiles * 4) return false;
  // Window columns and rows as the transforms address them, with room for a
  // strip's 80 columns.
  if (d.w > INT32_MAX - 128 || d.pw > INT32_MAX / 4 || d.ph > INT32_MAX / 4 || d.ow > INT32_MAX / 4 ||
      d.oh > INT32_MAX / 4 || d.h > INT32_MAX)
    return false;
  int64_t plane = 0, images = 0;
  return !__builtin_mul_overflow(d.h, d.w, &plane) && !__builtin_mul_overflow(plane, d.c, &images);
}

void winogradConv2d(const Conv2dDims& d, const float* x, const float* u, float* out, const ConvPostOps& post,
                    int64_t form) {
  int64_t tile = loop::winogradFormTile(form), strips = blockStripsOf(form);
  WinogradJob job{d, x, u, out, post, filterGroups(d.o), (d.ow + tile - 1) / tile, (d.oh + tile - 1) / tile, 0, 0};
  job.stripsX = (job.tilesX + kStripTiles - 1) / kStripTiles;
  job.blocks = (job.tilesY * job.stripsX + strips - 1) / strips;
  // The work of the direct form (what device::grainFlags was measured against), saturated.
  int64_t work = d.n;
  for (int64_t f : {d.o, d.oh, d.ow, d.c, int64_t(9)})
    if (__builtin_mul_overflow(work, f, &work)) work = INT64_MAX;
  auto task = form == loop::kWinogradF4 ? winogradTask<3> : form == 2 ? winogradTask<2> : winogradTask<1>;
  device::parallelFor(d.n * job.blocks, work / 64, task, reinterpret_cast<void* const*>(&job), nullptr);
}

}  // namespace detail

}  // namespace kiln::jit
