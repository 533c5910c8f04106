// The GEMM's building blocks, shared with the direct convolution (conv2d.cc) and
// the few-row and few-column products (gemm_skinny.cc): the machine's
// micro-kernel and its tile, the packed panels' layout, A packing, per-thread
// packing space. Internal to jit/; kernels reach these through gemm.h and conv2d.h.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "jit/gemm.h"

namespace kiln::jit::detail {

constexpr int64_t kKC = 128;  // contraction slice: an A panel and a B panel stay in L1/L2

struct Tile {
  int64_t mr, nr;
};

// What a micro-kernel applies to its finished tile in registers, before the
// store (after adding C when asked): plus bias[r] for tile row r when `bias` is
// set (a convolution's channel), plus columnBias[j] for tile column j when that is
// (a dense layer's unit), then ReLU as nn.relu computes it (v <= 0 becomes +0;
// NaN stays).
struct MicroPost {
  const float* bias = nullptr;
  bool relu = false;
  const float* columnBias = nullptr;
};

// C[h x w] (+)= A panel (MR-tall, kc deep) * B panel (kc deep, NR wide), then
// `post` when not null; only the valid h x w corner of the tile is written.
using MicroKernel = void (*)(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int64_t h, int64_t w,
                             bool add, const MicroPost* post);

// The same with A read in place, row-major: tile row r at a + r * lda. While
// it runs it brings `nextLines` cache lines from `nextB` on into L2 (one a
// step; null: none): the B panel the tiles after it read, so that a panel
// streamed from L3 is there before the first of them starts on it.
using MicroRowsKernel = void (*)(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc, int64_t h,
                                 int64_t w, bool add, const MicroPost* post, const float* nextB, int64_t nextLines);

struct Isa {
  MicroKernel micro;
  Tile tile;
  MicroRowsKernel microRows;  // null where A is always packed
  int vectorBits;             // 512 (AVX-512), 256 (AVX2 and FMA) or 0 (portable)
};

// The micro-kernels a GEMM may run with (jit::kGemmTiles): tile 0 is the default, tile 1 the
// wide alternative a schedule may choose (jit::GemmBlocking::tile): AVX-512 6 x 64;
// machines without one run the default for it. Out-of-range tiles are the default.
// The micro-kernel for this machine and tile (AVX-512 8 x 32 or 6 x 64, AVX2
// 6 x 16, or portable). Chosen once, when the library is loaded (the CPU does not
// change under a process), and read inline: a GEMV's dispatch asked several times
// a call. Nothing reads it from another library's static initializers.
extern const std::array<Isa, kGemmTiles> kIsaByTile;
inline const Isa& isa(int tile = 0) { return kIsaByTile[static_cast<unsigned>(tile) < kGemmTiles ? tile : 0]; }

// Prepacked B (packGemmB) is panel-major: panel after panel, each all k rows
// deep, NR floats a row. The block of panel q at depth p0.
inline int64_t panelBlock(int64_t q, int64_t p0, int64_t k, int64_t nr) { return q * nr * k + p0 * nr; }

// One 16-wide row of results: plus what `out` holds when `add`, plus the row's
// bias (*rowBias, broadcast) and the columns' biases when given, then ReLU as
// nn.relu computes it (v <= 0 becomes +0; NaN stays: an unordered compare is
// false), stored from the registers. The AVX2 tiles' and skinny panels' epilogue.
__attribute__((target("avx2,fma"), always_inline)) inline void storeRow256(__m256 lo, __m256 hi, float* out, bool add,
                                                                          const float* rowBias, const float* columnBias,
                                                                          bool relu) {
  if (add) {
    lo = _mm256_add_ps(lo, _mm256_loadu_ps(out));
    hi = _mm256_add_ps(hi, _mm256_loadu_ps(out + 8));
  }
  if (rowBias) {
    __m256 b = _mm256_broadcast_ss(rowBias);
    lo = _mm256_add_ps(lo, b);
    hi = _mm256_add_ps(hi, b);
  }
  if (columnBias) {
    lo = _mm256_add_ps(lo, _mm256_loadu_ps(columnBias));
    hi = _mm256_add_ps(hi, _mm256_loadu_ps(columnBias + 8));
  }
  if (relu) {
    const __m256 zero = _mm256_setzero_ps();
    lo = _mm256_blendv_ps(lo, zero, _mm256_cmp_ps(lo, zero, _CMP_LE_OQ));
    hi = _mm256_blendv_ps(hi, zero, _mm256_cmp_ps(hi, zero, _CMP_LE_OQ));
  }
  _mm256_storeu_ps(out, lo);
  _mm256_storeu_ps(out + 8, hi);
}

// Packs rows [i0, i0+rows) x depth [p0, p0+kc) of A (k x m stored when t) into
// MR-tall panels, zero-padded.
void packA(const float* a, int64_t lda, bool t, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int64_t mr, float* out);

// Packing space of the calling thread, 64-byte aligned, kept and grown between
// calls. Slot 0 holds A panels, slot 1 B panels (or the row convolution's band
// of padded input rows), slot 2 the row convolution's tap offsets
// (conv2d_rows.cc), slot 3 the padded copy two chained convolutions pass
// between them (conv2d_pair.cc).
float* scratch(int slot, size_t floats);

// Products of few columns as inner products along k (gemm_dot.cc): for a
// row-major A and a B stored transposed (n x k), of at most kDotMostColumns
// columns, on machines with AVX-512 (dotProductsApply); by default where this
// machine's measurements found them faster than the panel kernels
// (dotProductsPay), or where a schedule asks (GemmBlocking::narrow).
constexpr int64_t kDotMostColumns = 32;
bool dotProductsApply(int64_t n, bool transA, bool transB);
bool dotProductsPay(int64_t m, int64_t n, int64_t k);
void dotGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
             bool accumulate, const GemmPost& post);

// Products of few rows (m <= kSkinnyRows) stream B's NR-wide panels once, and
// products of few columns (n <= kNarrowColumns) run the same panel kernel over 8
// rows at a time (gemm_skinny.cc). C's rows [0, m) times B's panels: B prepacked
// (`packed`, past its header) or read in place when not transposed (row p of
// panel q at b + p * ldb + q * NR); A read in place, element (i, p) at
// a[i * aRow + p * aCol]. The job is taken by reference, never copied: built in
// place by the caller, a by-value copy read its bools back as wider words than
// they were stored (a store-forwarding stall, 5 of a 1 x 32 by 32 x 16 product's
// 34 ns).
constexpr int64_t kNarrowColumns = 16;

struct SkinnyJob {
  int64_t m, n, k;
  const float* a;
  int64_t aRow, aCol;
  const float* b;  // in place, when packed is null
  int64_t ldb;
  const float* packed;  // packed panels (past the header, panel-major), or null
  float* c;
  int64_t ldc;
  bool accumulate;
  GemmPost post;
  bool backward = false;  // panels in descending order (skinnyGemm)
};

void skinnyGemm(SkinnyJob&& j);
// skinnyGemm of prepacked panels, each thread then running `then` on the columns
// it made (GemmEpilogue); each column group is whole panels.
void skinnyGemmThen(SkinnyJob&& j, const GemmEpilogue& then);
void narrowGemm(SkinnyJob&& j);

// Whether this thread's stream of `bytes` of the prepacked weight (part) at `b`
// comes from beyond its L2: over farStreamBytes() (twice the L2) streamed by this
// thread through the skinny path since b's last stream began. Records this
// stream. The skinny path then prefetches the panels' lines ahead of its reads.
// Weights are tracked in kFarStreamSlots direct-mapped slots (recentSlot); one
// whose slot another took since is taken as near.
bool farStream(const float* b, int64_t bytes);
uint64_t farStreamBytes();
// Whether the skinny path prefetches far streams at all: by default on Intel
// cores only (hostCpuIsIntel). There the prefetches ahead of the reads made a
// batch-1 MLP's 2.7 MB of layers on one thread 1.03-1.06x a plain read loop's
// time, against 1.12-1.16x without (a Sapphire Rapids-class Xeon); on an AMD
// EPYC guest (AVX-512, 1 MiB L2) the same layers took 1.30-1.43x with them, in
// T0, T1 and NTA and at 1-8 KB ahead alike, and 1.17-1.22x without. Tests set
// it to run the prefetched path on any machine.
bool farStreamPrefetch();
void setFarStreamPrefetch(bool on);
// Whether the one-row kernel of four whole panels (skinnyFourPanels512) asks
// for each panel's next 16 steps (2 KB) while it reads the current ones: by
// default on AMD Zen 5 (cpuid family 0x1a) only, where the core's own
// prefetchers leave four interleaved streams well short of one: in one process,
// by turns against a read loop over the same bytes (AVX-512 Zen 5 guest, 1 MiB
// L2), 256 x 512 from L2 took 1.17x the read loop's time with them against
// 1.28x without, 512 x 512 0.83x against 1.03x, 784 x 512 from L3 0.75x against
// 0.98x, and a two-thread 256 x 1024 (an LSTM step) 1.22x against 1.34x. On a
// Zen 4 guest (family 0x19, 1 MiB L2) they cost time: by turns in one process,
// 128 KB to 1.5 MB of panels took 1.02-1.09x as long with them as without, on
// one thread and on two. Unmeasured on Intel. Tests set it to run both paths
// on any machine.
bool fourPanelPrefetch();
void setFourPanelPrefetch(bool on);
constexpr size_t kFarStreamSlots = 16;

// A direct-mapped slot for a weight among `slots` (a power of two): the
// address's bits above the cache line, mixed, since pool blocks are often
// aligned far beyond 64 bytes and their low bits alike.
inline size_t recentSlot(const float* b, size_t slots) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(b) >> 6) * 0x9E3779B97F4A7C15ull >> 58) & (slots - 1);
}

}  // namespace kiln::jit::detail
