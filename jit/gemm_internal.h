// The GEMM's building blocks, shared with the direct convolution (conv2d.cc):
// the machine's micro-kernel and its tile, A packing, per-thread packing space.
// Internal to jit/; kernels reach these through gemm.h and conv2d.h.
#pragma once

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

// The same with A read in place, row-major: tile row r at a + r * lda.
using MicroRowsKernel = void (*)(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc, int64_t h,
                                 int64_t w, bool add, const MicroPost* post);

struct Isa {
  MicroKernel micro;
  Tile tile;
  MicroRowsKernel microRows;  // null where A is always packed
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

}  // namespace kiln::jit::detail
