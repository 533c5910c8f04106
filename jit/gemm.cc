// Packing, blocking, the AVX-512 / AVX2 micro-kernels, and the parallel driver.
#include "jit/gemm.h"
#include "jit/gemm_internal.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "device/thread_pool.h"

namespace kiln::jit {

using device::currentThreads;
using device::parallelFor;

using namespace detail;

namespace {

// Packed B: blocks of KC rows (fewer in the last) by NR columns (row-major, NR
// floats a row, zero-padded). Prepacked weights are panel-major: panel after
// panel, each all k rows deep, so that streaming one panel (the skinny path) is
// one sequential read; B packed per call by the tile driver is slice-major: the
// panels of one KC slice side by side, which that driver walks in order.
struct PackedLayout {
  bool panelMajor;
  int64_t k, npad, nr;
  // The block of panel q at depth p0 (a multiple of KC).
  int64_t block(int64_t q, int64_t p0) const {
    if (panelMajor) return panelBlock(q, p0, k, nr);
    return p0 * npad + q * nr * std::min(kKC, k - p0);
  }
};

// Element (i, p) of the logical (untransposed) A.
inline float elemA(const float* a, int64_t lda, bool t, int64_t i, int64_t p) { return t ? a[p * lda + i] : a[i * lda + p]; }

}  // namespace

void detail::packA(const float* a, int64_t lda, bool t, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int64_t mr, float* out) {
  for (int64_t ip = 0; ip < rows; ip += mr) {
    int64_t h = std::min(mr, rows - ip);
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t r = 0; r < h; ++r) out[r] = elemA(a, lda, t, i0 + ip + r, p0 + p);
      for (int64_t r = h; r < mr; ++r) out[r] = 0;
      out += mr;
    }
  }
}

namespace {

// Packs depth [p0, p0+kc) x columns [j0, j0+cols) of B into NR-wide panels, zero-padded.
void packB(const float* b, int64_t ldb, bool t, int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* out) {
  if (t) {
    // B is stored n x k: read each of its rows (a column of the logical B) contiguously.
    for (int64_t jp = 0; jp < cols; jp += nr, out += nr * kc) {
      int64_t w = std::min(nr, cols - jp);
      for (int64_t c = 0; c < nr; ++c) {
        if (c >= w) {
          for (int64_t p = 0; p < kc; ++p) out[p * nr + c] = 0;
          continue;
        }
        const float* row = b + (j0 + jp + c) * ldb + p0;
        for (int64_t p = 0; p < kc; ++p) out[p * nr + c] = row[p];
      }
    }
    return;
  }
  for (int64_t jp = 0; jp < cols; jp += nr) {
    int64_t w = std::min(nr, cols - jp);
    for (int64_t p = 0; p < kc; ++p) {
      if (w == nr) {
        std::memcpy(out, b + (p0 + p) * ldb + j0 + jp, sizeof(float) * static_cast<size_t>(nr));
      } else {
        for (int64_t c = 0; c < w; ++c) out[c] = b[(p0 + p) * ldb + j0 + jp + c];
        for (int64_t c = w; c < nr; ++c) out[c] = 0;
      }
      out += nr;
    }
  }
}

// Writes an MR x NR tile (in `tile`) to C, only the valid h x w part, adding
// when asked, then the post-ops.
void storeTile(const float* tile, int64_t nr, float* c, int64_t ldc, int64_t h, int64_t w, bool add,
               const MicroPost* post) {
  for (int64_t r = 0; r < h; ++r)
    for (int64_t j = 0; j < w; ++j) {
      float v = add ? c[r * ldc + j] + tile[r * nr + j] : tile[r * nr + j];
      if (post && post->bias) v += post->bias[r];
      if (post && post->columnBias) v += post->columnBias[j];
      if (post && post->relu && v <= 0.0f) v = 0.0f;
      c[r * ldc + j] = v;
    }
}

// The end of an R x 16V AVX-512 tile: C (+)= the accumulators, then the
// post-ops, stored from the registers; the valid h x w corner only, through
// column masks (a partial tile costs the same stores as a full one).
template <int R, int V>
__attribute__((target("avx512f,fma"), always_inline)) inline void finishTile512(__m512 (&acc)[R][V], float* c, int64_t ldc, int64_t h,
                                                                               int64_t w, bool add, const MicroPost* post) {
  __mmask16 mask[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    int64_t left = w - 16 * v;
    mask[v] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r == h) break;
    float* out = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      __m512 x = acc[r][v];
      if (add) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[v], out + 16 * v));
      if (post) {
        if (post->bias) x = _mm512_add_ps(x, _mm512_set1_ps(post->bias[r]));
        if (post->columnBias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[v], post->columnBias + 16 * v));
        if (post->relu) x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_LE_OQ), x, zero);
      }
      _mm512_mask_storeu_ps(out + 16 * v, mask[v], x);
    }
  }
}

// B's rows are prefetched this many steps ahead. A panel deeper than L1
// holds (a whole-depth slice of 784 rows is 100 KB at NR = 32) comes from L2
// at every row tile, and the hardware's streams did not keep up with eight
// broadcast streams of A beside it: prefetched, a batch-64 layer of 784 inputs
// ran 7-9% faster (in-process A/B on this Xeon), one 128 deep (its panel stays
// in L1) the same. Past the panel's end the prefetches touch only addresses,
// which never fault.
constexpr int64_t kPrefetchSteps = 16;

// R x 16V tile: R * V zmm accumulators; per step V vector loads of B and R
// broadcasts of A feed R * V independent FMAs. `at(r, p)` reads A's element for
// tile row r at depth p: from a packed panel, or in place. 8 x 32 (the default)
// spends eight broadcasts on sixteen FMAs; 6 x 64 six on twenty-four, so more of
// the load ports feed the FMAs (a tuning choice: its panels are twice as wide).
template <int R, int V, class ReadA>
__attribute__((target("avx512f,fma"), always_inline)) inline void tile512(int64_t kc, ReadA at, const float* bp, float* c, int64_t ldc,
                                                                         int64_t h, int64_t w, bool add, const MicroPost* post,
                                                                         const float* nextB = nullptr, int64_t nextLines = 0) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& x : row) x = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p, bp += 16 * V) {
    __m512 b[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm_prefetch(reinterpret_cast<const char*>(bp + kPrefetchSteps * 16 * V + 16 * v), _MM_HINT_T0);
    if (p < nextLines) _mm_prefetch(reinterpret_cast<const char*>(nextB + 16 * p), _MM_HINT_T1);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 a = _mm512_set1_ps(at(r, p));
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  finishTile512<R, V>(acc, c, ldc, h, w, add, post);
}

template <int R, int V>
__attribute__((target("avx512f,fma"))) void micro512(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                                                     int64_t h, int64_t w, bool add, const MicroPost* post) {
  tile512<R, V>(kc, [ap](int r, int64_t p) { return ap[p * R + r]; }, bp, c, ldc, h, w, add, post);
}

// The same tile with A read in place, row-major: row r at a + r * lda (rows at or
// past h repeat the last valid one; their sums are not stored). The broadcasts
// load from R sequential streams instead of one packed panel, so a row-major
// A needs no packing at all (packing cost the tall driver ~9% of a batch-64 MLP).
template <int R, int V>
__attribute__((target("avx512f,fma"))) void micro512Rows(int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
                                                         int64_t ldc, int64_t h, int64_t w, bool add, const MicroPost* post,
                                                         const float* nextB, int64_t nextLines) {
  const float* rows[R];
  for (int64_t i = 0; i < R; ++i) rows[i] = a + std::min(i, h - 1) * lda;
  tile512<R, V>(kc, [&rows](int r, int64_t p) { return rows[r][p]; }, bp, c, ldc, h, w, add, post, nextB, nextLines);
}

// The end of an R x 16 AVX2 tile, as finishTile512: the valid rows of a tile 16
// wide are added, biased, rectified and stored from the registers (through a
// buffer and scalar stores a full tile cost a quarter of a 128-deep slice's
// time, and the short last row tile of 32 or 64 filters as much again); a tile
// narrower than 16 goes through storeTile.
template <int R>
__attribute__((target("avx2,fma"), always_inline)) inline void finishTile256(__m256 (&acc)[R][2], float* c, int64_t ldc, int64_t h,
                                                                            int64_t w, bool add, const MicroPost* post) {
  if (w == 16) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      if (r == h) break;
      if (post) storeRow256(acc[r][0], acc[r][1], c + r * ldc, add, post->bias ? post->bias + r : nullptr, post->columnBias,
                            post->relu);
      else storeRow256(acc[r][0], acc[r][1], c + r * ldc, add, nullptr, nullptr, false);
    }
    return;
  }
  alignas(64) float tile[R * 16];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(tile + r * 16, acc[r][0]);
    _mm256_store_ps(tile + r * 16 + 8, acc[r][1]);
  }
  storeTile(tile, 16, c, ldc, h, w, add, post);
}

// One contraction step of an R x 16 tile: B's row at `bp`, A's R values at depth p.
template <int R, class AddressA>
__attribute__((target("avx2,fma"), always_inline)) inline void step256(__m256 (&acc)[R][2], AddressA at, int64_t p,
                                                                      const float* bp) {
  __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    __m256 a = _mm256_broadcast_ss(at(r, p));
    acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
    acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
  }
}

// 6 x 16 tile for AVX2: 12 ymm accumulators; per step two vector loads of B and six
// broadcasts of A. `at(r, p)` points at A's element for tile row r at depth p:
// in a packed panel, or in place. The row loops are unrolled by force: GCC left
// them rolled and kept the accumulators on the stack, a load and a store around
// every FMA (15% of peak).
// R < 6 for the last row tile of a product whose rows are not a multiple of 6
// (32 filters: 5 tiles and one of 2 rows; 64: 10 and one of 4): a full tile
// there spent its FMAs on padding (conv 3->32 computed 36 rows for 32).
template <int R, class AddressA>
__attribute__((target("avx2,fma"), always_inline)) inline void tile256(int64_t kc, AddressA at, const float* bp, float* c,
                                                                      int64_t ldc, int64_t h, int64_t w, bool add,
                                                                      const MicroPost* post) {
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p, bp += 16) step256<R>(acc, at, p, bp);
  finishTile256<R>(acc, c, ldc, h, w, add, post);
}

// The 2-row tile sums even and odd steps apart: its 4 accumulators alone are
// one FMA chain each, and with a 4-cycle FMA latency on two pipes they ran at
// half the FMA rate (the 2-row tile of 32 filters took a tenth of a 3->32
// convolution's time for a sixteenth of its rows).
template <class AddressA>
__attribute__((target("avx2,fma"), always_inline)) inline void tile256Pairs(int64_t kc, AddressA at, const float* bp,
                                                                           float* c, int64_t ldc, int64_t h, int64_t w,
                                                                           bool add, const MicroPost* post) {
  __m256 acc[2][2], odd[2][2];
#pragma GCC unroll 2
  for (int r = 0; r < 2; ++r) acc[r][0] = acc[r][1] = odd[r][0] = odd[r][1] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 2 <= kc; p += 2, bp += 32) {
    step256<2>(acc, at, p, bp);
    step256<2>(odd, at, p + 1, bp + 16);
  }
  if (p < kc) step256<2>(acc, at, p, bp);
#pragma GCC unroll 2
  for (int r = 0; r < 2; ++r) {
    acc[r][0] = _mm256_add_ps(acc[r][0], odd[r][0]);
    acc[r][1] = _mm256_add_ps(acc[r][1], odd[r][1]);
  }
  finishTile256<2>(acc, c, ldc, h, w, add, post);
}

// The tile with as many rows as `h` needs: 2, 4 or 6.
template <class AddressA>
__attribute__((target("avx2,fma"), always_inline)) inline void rowsTile256(int64_t kc, AddressA at, const float* bp, float* c,
                                                                          int64_t ldc, int64_t h, int64_t w, bool add,
                                                                          const MicroPost* post) {
  if (h <= 2) tile256Pairs(kc, at, bp, c, ldc, h, w, add, post);
  else if (h <= 4) tile256<4>(kc, at, bp, c, ldc, h, w, add, post);
  else tile256<6>(kc, at, bp, c, ldc, h, w, add, post);
}

__attribute__((target("avx2,fma"))) void micro256(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                                                  int64_t h, int64_t w, bool add, const MicroPost* post) {
  rowsTile256(kc, [ap](int r, int64_t p) { return ap + p * 6 + r; }, bp, c, ldc, h, w, add, post);
}

// The same tile with A read in place, row-major (rows at or past h repeat the
// last valid one; their sums are not stored), as micro512Rows: no packing of A.
__attribute__((target("avx2,fma"))) void micro256Rows(int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
                                                      int64_t ldc, int64_t h, int64_t w, bool add, const MicroPost* post,
                                                      const float*, int64_t) {
  const float* rows[6];
  for (int64_t i = 0; i < 6; ++i) rows[i] = a + std::min(i, h - 1) * lda;
  rowsTile256(kc, [&rows](int r, int64_t p) { return rows[r] + p; }, bp, c, ldc, h, w, add, post);
}

// Portable fallback with the AVX2 tile shape.
void microScalar(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int64_t h, int64_t w, bool add,
                 const MicroPost* post) {
  float tile[6 * 16] = {};
  for (int64_t p = 0; p < kc; ++p, ap += 6, bp += 16)
    for (int r = 0; r < 6; ++r)
      for (int j = 0; j < 16; ++j) tile[r * 16 + j] += ap[r] * bp[j];
  storeTile(tile, 16, c, ldc, h, w, add, post);
}

}  // namespace

const std::array<Isa, kGemmTiles> detail::kIsaByTile = [] {
  __builtin_cpu_init();  // a static initializer may run before libgcc's
  Isa plain{microScalar, {6, 16}, nullptr, 0};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) plain = Isa{micro256, {6, 16}, micro256Rows, 256};
  if (__builtin_cpu_supports("avx512f"))
    return std::to_array(
        {Isa{micro512<8, 2>, {8, 32}, micro512Rows<8, 2>, 512}, Isa{micro512<6, 4>, {6, 64}, micro512Rows<6, 4>, 512}});
  return std::to_array({plain, plain});
}();

namespace {

struct GemmJob {
  int64_t m, n, k, lda, ldb, ldc;
  const float* a;
  const float* b;
  float* c;
  bool transA, transB, accumulate;
  const float* packedB;  // all of B, packed in `layout`
  int64_t mc;            // rows per task
  PackedLayout layout;   // of packedB
  GemmPost post;
  int64_t kc = kKC;      // contraction slice (any, when packedB is panel-major)
  const Isa* cpu = nullptr;  // the micro-kernel and its tile (packedB's NR)
  bool packA = false;        // pack A even where it could be read in place
};

// The micro-kernel's post-ops for the tile at column jr with the last KC slice
// (none before it, or when there are none).
inline MicroPost tilePost(const GemmPost& post, int64_t jr) { return MicroPost{nullptr, post.relu, post.bias ? post.bias + jr : nullptr}; }
inline bool hasPost(const GemmPost& post) { return post.bias || post.relu; }

struct FreeFloats {
  void operator()(float* p) const { ::operator delete(p, std::align_val_t(64)); }
};

}  // namespace

// Packing space, kept per thread and grown as needed: no allocation (and no page
// faults on fresh memory) per call once warm. `slot` keeps A and B apart.
//
// Zeroed when allocated. Kernels compute some lanes they never store (a row
// convolution's strips past the output width read a padded row's unwritten tail),
// and recycled heap memory there holds old pointers and integers, which read as
// float denormals: on Intel cores every FMA with a denormal operand takes a
// microcode assist. On a Sapphire Rapids-class Xeon a 64 x 56 x 56 3 x 3
// convolution on two threads took 5.3-5.9 ms, against 1.8-2.6 on one, whenever a
// new worker's band came from freed memory (a Runtime made after another was
// destroyed, or kernel_bench's pool rebuilt for each thread count): its tasks took
// 5.3-5.7 ms each against the caller's 0.3. Zeroed, it takes 1.3-1.7 ms. Zen
// cores take denormals at full speed, so earlier figures never showed it. Lanes
// past what a kernel writes then hold zeros or finite values earlier kernels wrote.
float* detail::scratch(int slot, size_t floats) {
  thread_local std::unique_ptr<float, FreeFloats> buf[4];
  thread_local size_t cap[4] = {0, 0, 0, 0};
  if (cap[slot] < floats) {
    buf[slot].reset(static_cast<float*>(::operator new(floats * sizeof(float), std::align_val_t(64))));
    std::memset(buf[slot].get(), 0, floats * sizeof(float));
    cap[slot] = floats;
  }
  return buf[slot].get();
}

namespace {

// One task: rows [i0, i0 + mc) of C by columns [j0, j1) (whole panels, or to
// n), over all of k.
void rowBlock(const GemmJob& j, int64_t i0, int64_t j0, int64_t j1) {
  const Isa& cpu = *j.cpu;
  int64_t mr = cpu.tile.mr, nr = cpu.tile.nr;
  int64_t rows = std::min(j.mc, j.m - i0);
  int64_t rowsPad = (rows + mr - 1) / mr * mr;
  // A row-major A is read in place where the machine has the kernel for it
  // (unless the schedule packs it: the broadcasts then read one stream, not MR).
  bool inPlace = !j.transA && cpu.microRows && !j.packA;
  float* ap = inPlace ? nullptr : scratch(0, static_cast<size_t>(rowsPad * j.kc));
  for (int64_t p0 = 0; p0 < j.k; p0 += j.kc) {
    int64_t kc = std::min(j.kc, j.k - p0);
    if (!inPlace) packA(j.a, j.lda, j.transA, i0, rows, p0, kc, mr, ap);
    bool add = j.accumulate || p0 > 0, last = p0 + kc == j.k && hasPost(j.post);
    // The row tiles of one panel share out bringing the next panel into L2
    // (kc x NR floats, kc * NR / 16 lines), at most a line a step each, where
    // a panel is deeper than half of L1 holds: a batch-64 MLP's two layers
    // (784 and 512 deep, 2.6 MB of weights: from L3 every run) 2-3% faster on
    // one thread in an in-process A/B; a 128-deep panel, which the hardware's
    // streams bring in time, was 2-3% slower with it.
    bool pullNext = kc * nr * static_cast<int64_t>(sizeof(float)) > 24 * 1024;
    int64_t tiles = (rows + mr - 1) / mr, nextLines = kc * nr / 16;
    int64_t linesPerTile = std::min(kc, (nextLines + tiles - 1) / tiles);
    for (int64_t jr = j0; jr < j1; jr += nr) {
      const float* bp = j.packedB + j.layout.block(jr / nr, p0);
      const float* next = pullNext && jr + nr < j1 ? j.packedB + j.layout.block(jr / nr + 1, p0) : nullptr;
      MicroPost post = tilePost(j.post, jr);
      for (int64_t ir = 0; ir < rows; ir += mr) {
        float* c = j.c + (i0 + ir) * j.ldc + jr;
        int64_t h = std::min(mr, rows - ir), w = std::min(nr, j.n - jr);
        int64_t first = ir / mr * linesPerTile, lines = next ? std::clamp<int64_t>(nextLines - first, 0, linesPerTile) : 0;
        if (inPlace)
          cpu.microRows(kc, j.a + (i0 + ir) * j.lda + p0, j.lda, bp, c, j.ldc, h, w, add, last ? &post : nullptr,
                        next ? next + 16 * first : nullptr, lines);
        else cpu.micro(kc, ap + (ir / mr) * mr * kc, bp, c, j.ldc, h, w, add, last ? &post : nullptr);
      }
    }
  }
}

// Packing B: one task per (KC slice, NR panel).
struct PackJob {
  const float* b;
  int64_t ldb;
  bool transB;
  int64_t k, n, nr, panels;
  float* out;  // panel q's slice s at out + layout.block(q, s * KC)
  PackedLayout layout;
};

void packBTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const PackJob& j = *reinterpret_cast<const PackJob*>(ctx);
  for (int64_t t = begin; t < end; ++t) {
    int64_t s = t / j.panels, q = t % j.panels;
    int64_t p0 = s * kKC, kc = std::min(kKC, j.k - p0), j0 = q * j.nr;
    packB(j.b, j.ldb, j.transB, p0, kc, j0, std::min(j.nr, j.n - j0), j.nr, j.out + j.layout.block(q, p0));
  }
}

void rowBlockTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const GemmJob& j = *reinterpret_cast<const GemmJob*>(ctx);
  for (int64_t blk = begin; blk < end; ++blk) rowBlock(j, blk * j.mc, 0, j.n);
}

// One task: all rows by the panels [begin, end).
void panelRangeTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const GemmJob& j = *reinterpret_cast<const GemmJob*>(ctx);
  int64_t nr = j.cpu->tile.nr;
  rowBlock(j, 0, begin * nr, std::min(j.n, end * nr));
}

// A short, wide product (m <= kWideRows: a convolution's filters times its
// unfolded input, a small batch times a layer): A is packed once, whole, and the
// columns are shared out. Each B panel is packed just before use into a buffer
// that stays in L1, and every row tile then reuses it: B goes from memory to the
// registers once, with no packed copy of all of B written out and read back.
constexpr int64_t kWideRows = 128;

struct WideJob {
  int64_t m, n, k, ldb, ldc;
  const float* b;
  float* c;
  bool transB, accumulate;
  const float* packedA;  // KC slice s at packedA + s * kKC * mpad, MR-tall panels
  int64_t mpad;
  int64_t nc;  // columns per task, a multiple of NR
  GemmPost post;
  const Isa* cpu;
};

void wideBlockTask(void* const* ctx, const int64_t*, int64_t begin, int64_t end) {
  const WideJob& j = *reinterpret_cast<const WideJob*>(ctx);
  const Isa& cpu = *j.cpu;
  int64_t mr = cpu.tile.mr, nr = cpu.tile.nr;
  float* bp = scratch(1, static_cast<size_t>(kKC * nr));
  for (int64_t blk = begin; blk < end; ++blk) {
    int64_t j0 = blk * j.nc, cols = std::min(j.nc, j.n - j0);
    for (int64_t p0 = 0; p0 < j.k; p0 += kKC) {
      int64_t kc = std::min(kKC, j.k - p0);
      const float* aslice = j.packedA + (p0 / kKC) * kKC * j.mpad;
      bool add = j.accumulate || p0 > 0, last = p0 + kc == j.k && hasPost(j.post);
      for (int64_t jr = 0; jr < cols; jr += nr) {
        int64_t w = std::min(nr, cols - jr);
        packB(j.b, j.ldb, j.transB, p0, kc, j0 + jr, w, nr, bp);
        MicroPost post = tilePost(j.post, j0 + jr);
        for (int64_t ir = 0; ir < j.m; ir += mr)
          cpu.micro(kc, aslice + (ir / mr) * mr * kc, bp, j.c + ir * j.ldc + j0 + jr, j.ldc, std::min(mr, j.m - ir), w, add,
                    last ? &post : nullptr);
      }
    }
  }
}

void wideGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
              bool transB, float* c, int64_t ldc, bool accumulate, const GemmPost& post, const Isa& cpu) {
  int64_t nr = cpu.tile.nr, mr = cpu.tile.mr;
  int64_t mpad = (m + mr - 1) / mr * mr;
  int64_t slices = (k + kKC - 1) / kKC;
  float* ap = scratch(0, static_cast<size_t>(slices * kKC * mpad));
  for (int64_t s = 0; s < slices; ++s)
    packA(a, lda, transA, 0, m, s * kKC, std::min(kKC, k - s * kKC), mr, ap + s * kKC * mpad);
  // Column blocks, each a whole number of panels: a few per thread, so that a
  // block's slice of C (re-read once per KC slice) stays in L2.
  int64_t panels = (n + nr - 1) / nr;
  int64_t blocks = std::min<int64_t>(panels, 4 * currentThreads());
  int64_t nc = (panels + blocks - 1) / blocks * nr;
  WideJob job{m, n, k, ldb, ldc, b, c, transB, accumulate, ap, mpad, nc, post, &cpu};
  parallelFor((n + nc - 1) / nc, m * n * k / 64, wideBlockTask, reinterpret_cast<void* const*>(&job), nullptr);
}


// Whether a product runs as inner products (gemm_dot.cc): where they apply, as
// the schedule says, or by default where they pay.
bool byDotProducts(int64_t m, int64_t n, int64_t k, bool transA, bool transB, const GemmBlocking& blocking) {
  if (blocking.narrow == kGemmNarrowPanels || !dotProductsApply(n, transA, transB)) return false;
  return blocking.narrow == kGemmNarrowDot || dotProductsPay(m, n, k);
}

}  // namespace

// Rows per task: the schedule's, or enough tasks for every thread; whole tiles.
int64_t rowsPerTask(int64_t m, int64_t mr, const GemmBlocking& blocking) {
  int threads = currentThreads();
  int64_t mc = blocking.mcTiles > 0 ? blocking.mcTiles * mr : std::max<int64_t>(mr, (m + threads - 1) / threads);
  return (mc + mr - 1) / mr * mr;
}

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
           bool transB, float* c, int64_t ldc, bool accumulate, const GemmPost& post, const GemmBlocking& blocking) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // An empty contraction: C (or zero), then the post-ops.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float v = accumulate ? c[i * ldc + j] : 0.0f;
        if (post.bias) v += post.bias[j];
        if (post.relu && v <= 0.0f) v = 0.0f;
        c[i * ldc + j] = v;
      }
    return;
  }
  if (byDotProducts(m, n, k, transA, transB, blocking)) return dotGemm(m, n, k, a, lda, b, ldb, c, ldc, accumulate, post);
  if (m <= kSkinnyRows && !transB)
    return skinnyGemm({m, n, k, a, transA ? 1 : lda, transA ? lda : 1, b, ldb, nullptr, c, ldc, accumulate, post});
  if (n <= kNarrowColumns && !transB)
    return narrowGemm({m, n, k, a, transA ? 1 : lda, transA ? lda : 1, b, ldb, nullptr, c, ldc, accumulate, post});
  const Isa& cpu = isa(static_cast<int>(blocking.tile));
  if (m <= kWideRows) return wideGemm(m, n, k, a, lda, transA, b, ldb, transB, c, ldc, accumulate, post, cpu);
  int64_t nr = cpu.tile.nr, mr = cpu.tile.mr;
  int64_t npad = (n + nr - 1) / nr * nr;
  // B is packed once, shared by every row block; the panels are packed in
  // parallel (serial packing held back the two-thread speed-up by ~10%).
  int64_t slices = (k + kKC - 1) / kKC;
  float* bp = scratch(1, static_cast<size_t>(slices * kKC * npad));
  PackJob pack{b, ldb, transB, k, n, nr, npad / nr, bp, {false, k, npad, nr}};
  parallelFor(slices * pack.panels, k * n, packBTask, reinterpret_cast<void* const*>(&pack), nullptr);
  // B packed here is sliced by KC: the default slice, whatever the schedule says.
  GemmJob job{m, n, k, lda, ldb, ldc, a, b, c, transA, transB, accumulate, bp, 0, {false, k, npad, nr}, post};
  job.cpu = &cpu;
  job.packA = blocking.packA;
  job.mc = rowsPerTask(m, mr, blocking);
  int64_t blocks = (m + job.mc - 1) / job.mc;
  parallelFor(blocks, m * n * k / 64, rowBlockTask, reinterpret_cast<void* const*>(&job), nullptr);
}

int64_t packedBFloats(int64_t k, int64_t n, int tile) {
  int64_t nr = isa(tile).tile.nr;
  if (k < 0 || n < 0 || n > (INT64_MAX - nr) / 2) return -1;
  int64_t npad = (n + nr - 1) / nr * nr;
  if (npad != 0 && k > (INT64_MAX / 4 - kPackedHeaderFloats) / npad) return -1;
  return kPackedHeaderFloats + k * npad;  // npad / NR panels of k x NR
}

void packGemmB(const float* b, int64_t ldb, bool transB, int64_t k, int64_t n, float* out, int tile) {
  int64_t nr = isa(tile).tile.nr;
  int64_t header[3] = {k, n, nr};
  std::memset(out, 0, sizeof(float) * kPackedHeaderFloats);
  std::memcpy(out, header, sizeof header);
  int64_t npad = (n + nr - 1) / nr * nr;
  PackJob pack{b, ldb, transB, k, n, nr, npad / nr, out + kPackedHeaderFloats, {true, k, npad, nr}};
  int64_t slices = (k + kKC - 1) / kKC;
  packBTask(reinterpret_cast<void* const*>(&pack), nullptr, 0, slices * pack.panels);
}

bool packedBMatches(const float* packed, int64_t k, int64_t n, int tile) {
  int64_t header[3];
  std::memcpy(header, packed, sizeof header);
  return header[0] == k && header[1] == n && header[2] == isa(tile).tile.nr;
}

namespace {

// Whether a product of m rows streams prepacked `packed` through the few-rows
// path: the skinny kernels read the default tile's panels, so B packed for
// another tile goes to the general drivers in place (sgemm).
bool streamsPanels(const float* packed, int64_t m, int64_t n, int64_t k, int tile) {
  return packed && m > 0 && m <= kSkinnyRows && n > 0 && k > 0 && packedBMatches(packed, k, n, tile) &&
         isa(tile).tile.nr == isa().tile.nr;
}

}  // namespace

void sgemmPacked(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
                 bool transB, const float* packed, float* c, int64_t ldc, bool accumulate, const GemmPost& post,
                 const GemmBlocking& blocking) {
  if (m > 0 && n > 0 && k > 0 && byDotProducts(m, n, k, transA, transB, blocking))
    return dotGemm(m, n, k, a, lda, b, ldb, c, ldc, accumulate, post);
  int tile = static_cast<int>(blocking.tile);
  if (streamsPanels(packed, m, n, k, tile))
    return skinnyGemm({m, n, k, a, transA ? 1 : lda, transA ? lda : 1, nullptr, 0, packed + kPackedHeaderFloats, c, ldc,
                       accumulate, post});
  const Isa& cpu = isa(tile);
  // The skinny and narrow kernels read the default tile's panels; B packed for
  // another tile goes to them in place (sgemm).
  bool few = m <= kSkinnyRows || n <= kNarrowColumns;
  if (!packed || m <= 0 || n <= 0 || k <= 0 || !packedBMatches(packed, k, n, tile) ||
      (few && cpu.tile.nr != isa().tile.nr))
    return sgemm(m, n, k, a, lda, transA, b, ldb, transB, c, ldc, accumulate, post, blocking);
  const float* panels = packed + kPackedHeaderFloats;
  int64_t nr = cpu.tile.nr, mr = cpu.tile.mr;
  int64_t npad = (n + nr - 1) / nr * nr;
  if (n <= kNarrowColumns)
    return narrowGemm({m, n, k, a, transA ? 1 : lda, transA ? lda : 1, nullptr, 0, panels, c, ldc, accumulate, post});
  GemmJob job{m, n, k, lda, ldb, ldc, a, b, c, transA, transB, accumulate, panels, 0, {true, k, npad, nr}, post};
  job.cpu = &cpu;
  job.packA = blocking.packA;
  // Panel-major panels are all k deep: any contraction slice reads them. By
  // default the whole depth when a task's rows of A, k deep, fit in a quarter of
  // L2: each C tile is then written once, post-ops included, instead of read and
  // written back once per 128-deep slice (a batch-64 layer of 784 inputs: 61 to
  // 70 GFLOP/s on one AVX2 core, 113 to 127 on two); deeper ones keep kKC.
  constexpr int64_t kWholeDepthBytes = 256 * 1024;
  // Few rows on several threads: each thread takes all rows by its own range
  // of panels (one range a thread, the same one every call), not a share of the
  // rows by all of B. It then streams 1/threads of the weights, not all of them,
  // and that part stays in its own core's L2 from call to call (a batch-64
  // layer's 1.6 MB of weights fits no one core's L2; half of it does).
  int64_t panelCount = npad / nr;
  int threads = currentThreads();
  bool byPanels = blocking.mcTiles == 0 && threads > 1 && m <= kWideRows && panelCount >= 2 * threads;
  job.mc = byPanels ? m : rowsPerTask(m, mr, blocking);
  if (blocking.kc > 0) job.kc = blocking.kc;
  else if ((job.mc + mr - 1) / mr * mr * k <= kWholeDepthBytes / 4) job.kc = k;
  if (byPanels)
    return parallelFor(panelCount, m * n * k / 64, panelRangeTask, reinterpret_cast<void* const*>(&job), nullptr, true);
  parallelFor((m + job.mc - 1) / job.mc, m * n * k / 64, rowBlockTask, reinterpret_cast<void* const*>(&job), nullptr);
}

void sgemmPackedThen(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                     bool transB, const float* packed, float* c, int64_t ldc, const GemmBlocking& blocking,
                     const GemmEpilogue& then) {
  int64_t columns = then.groups > 0 && n % then.groups == 0 ? n / then.groups : -1;
  // sgemmPacked's few-rows path, with groups of whole panels.
  if (columns > 0 && columns % isa().tile.nr == 0 && streamsPanels(packed, m, n, k, static_cast<int>(blocking.tile)))
    return detail::skinnyGemmThen({m, n, k, a, lda, 1, nullptr, 0, packed + kPackedHeaderFloats, c, ldc, false, {}},
                                  then);
  sgemmPacked(m, n, k, a, lda, false, b, ldb, transB, packed, c, ldc, false, {}, blocking);
  if (columns > 0) parallelFor(columns, then.work, then.task, then.buffers, then.shapes);
}

// Runs an entry point's product under the scopes its flags ask for: bit 4 serial,
// bits 25-30 the grain.
template <class Product>
void underFlags(int64_t flags, Product&& product) {
  device::underScopes((flags & kGemmFlagSerial) != 0, device::grainFromFlags(flags), product);
}

}  // namespace kiln::jit

extern "C" void kiln_sgemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                                  const float* packed, float* c, int64_t ldc, int64_t flags) {
  kiln::jit::underFlags(flags, [&] {
    kiln::jit::sgemmPacked(m, n, k, a, lda, (flags & 1) != 0, b, ldb, (flags & 2) != 0, packed, c, ldc, (flags & 4) != 0, {},
                           kiln::jit::gemmBlockingFromFlags(flags));
  });
}

extern "C" void kiln_sgemm_packed_then(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                                       int64_t ldb, const float* packed, float* c, int64_t ldc, int64_t flags,
                                       int64_t groups, kiln::device::ParallelTask then, void* const* buffers,
                                       const int64_t* shapes, int64_t work) {
  kiln::jit::underFlags(flags, [&] {
    kiln::jit::sgemmPackedThen(m, n, k, a, lda, b, ldb, (flags & 2) != 0, packed, c, ldc,
                               kiln::jit::gemmBlockingFromFlags(flags), {then, buffers, shapes, groups, work});
  });
}

extern "C" void kiln_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float* c, int64_t ldc, int64_t flags) {
  kiln::jit::underFlags(flags, [&] {
    kiln::jit::sgemm(m, n, k, a, lda, (flags & 1) != 0, b, ldb, (flags & 2) != 0, c, ldc, (flags & 4) != 0, {},
                     kiln::jit::gemmBlockingFromFlags(flags));
  });
}

extern "C" void kiln_sgemm_post(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                                const float* packed, float* c, int64_t ldc, int64_t flags, const float* bias) {
  kiln::jit::underFlags(flags, [&] {
    kiln::jit::sgemmPacked(m, n, k, a, lda, (flags & 1) != 0, b, ldb, (flags & 2) != 0, packed, c, ldc, (flags & 4) != 0,
                           kiln::jit::GemmPost{bias, (flags & 8) != 0}, kiln::jit::gemmBlockingFromFlags(flags));
  });
}
