// Single-precision matrix multiply for kernels: C = A * B (+ C), with A and B
// optionally transposed, run on the thread pool.
//
// BLIS-style: B is packed into panels NR columns wide (once, for a constant
// weight), and a register-blocked micro-kernel (AVX-512: 8 x 32, i.e. 16 zmm
// accumulators; AVX2: 6 x 16) computes each MR x NR tile of C over a KC slice of
// the contraction. A is packed into MR-tall panels where it must be (transposed,
// or no AVX-512); a row-major A is read in place, the micro-kernel broadcasting
// from its rows. Packing buffers are per thread and kept. Like IREE's
// microkernels this core is compiled ahead of time with a run-time choice of
// instruction set; the JIT-generated kernels call it, and a dense layer's bias and
// ReLU are applied by it (GemmPost) rather than by a second pass.
#pragma once

#include <cstdint>

#include "device/thread_pool.h"

namespace kiln::jit {

// Row-major matrices: A is m x k (or k x m when transA), with leading dimension
// lda; B is k x n (or n x k when transB); C is m x n with leading dimension ldc.
// accumulate = false overwrites C.
//
// Products of few rows (m <= kSkinnyRows: batch-1 layers, LSTM steps, tree nodes)
// are weight-streaming problems: they take a separate path that reads each B
// panel once with vector FMAs into m x NR register accumulators, with no packing
// of A and, when B is prepacked or not transposed, none of B either.
// What the product applies to each element of C as it finishes it, while the
// element is still in a register (after adding C's old value when accumulating):
// plus bias[j] for column j when `bias` is set, then ReLU as nn.relu computes it.
// A dense layer's `relu(bias_add(dense(x, w), b))` is then one pass over C.
struct GemmPost {
  const float* bias = nullptr;  // n floats
  bool relu = false;
};

// A schedule's blocking of the general (many-row) product (loop::Schedule's kc
// and mc; 0: the defaults): the contraction slice, which applies where B is
// prepacked (its panels are all k deep), and the rows each task takes, in tiles.
// The micro-kernel tile (detail::isa(tile): 0 the machine's default, 1 the wide
// one where there is one) and whether A is packed even where the tile could read
// it in place (a row-major A) are the schedule's too, and so is how a product of
// few columns runs (`narrow`): 0 the runtime's choice, kGemmNarrowPanels the
// panel kernels, kGemmNarrowDot inner products along k wherever they apply (a
// row-major A and a B stored transposed, as a dense layer's: gemm_dot.cc).
// The tiles a schedule may choose from (detail::isa).
constexpr int kGemmTiles = 2;
constexpr int64_t kGemmNarrowPanels = 1, kGemmNarrowDot = 2;

struct GemmBlocking {
  int64_t kc = 0;
  int64_t mcTiles = 0;
  int64_t tile = 0;
  bool packA = false;
  int64_t narrow = 0;
};

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
           bool transB, float* c, int64_t ldc, bool accumulate, const GemmPost& post = {}, const GemmBlocking& blocking = {});

constexpr int64_t kSkinnyRows = 8;

// Prepacked B: all of a k x n B in the layout the GEMM reads it in (NR-wide,
// zero-padded panels for this machine's micro-kernel, one after another, each all
// k rows deep, so that streaming a panel is one sequential read), made once for
// a constant weight and then shared, read-only, by every call. The
// first kPackedHeaderFloats floats hold (k, n, NR) as int64 so that a packed
// buffer given for another shape or machine is never misread.
constexpr int64_t kPackedHeaderFloats = 16;
// Floats a packed k x n B takes, header included; -1 if that overflows.
// `tile`: the micro-kernel tile the panels are for (GemmBlocking::tile).
int64_t packedBFloats(int64_t k, int64_t n, int tile = 0);
// Packs B (k x n, or n x k stored when transB) into `out` (packedBFloats floats, 64-byte aligned).
void packGemmB(const float* b, int64_t ldb, bool transB, int64_t k, int64_t n, float* out, int tile = 0);
// Whether `packed` was made by packGemmB for a k x n B and this tile on this machine.
bool packedBMatches(const float* packed, int64_t k, int64_t n, int tile = 0);

// sgemm with B prepacked; `packed` null, or made for another shape, falls back to B itself.
// Threads: up to 128 rows and at least two panels a thread (without a
// schedule's rows per task), each thread takes all rows by its own range of
// panels, the same range every call, so that its part of a constant weight
// stays in its own core's L2; otherwise the rows are split.
void sgemmPacked(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
                 bool transB, const float* packed, float* c, int64_t ldc, bool accumulate, const GemmPost& post = {},
                 const GemmBlocking& blocking = {});

// A loop that runs after a product and reads C by column groups: C's n columns
// are `groups` groups of n / groups, and the loop's iteration j (over
// 0 .. n / groups) reads only column j of each group, in every row. An LSTM
// step's gate pass is one: hidden unit j reads its four gates, columns j,
// j + H, j + 2H and j + 3H of the recurrent product. `task` runs iterations
// [begin, end) as a kiln_parallel_for task does; `work` is the loop's estimate
// for the pool.
//
// Where the few-rows path runs (m <= kSkinnyRows, B prepacked, each group whole
// panels), each thread makes the same part of every group and then runs the
// loop on exactly those columns: the loop reads only what its own thread just
// wrote, and the element-wise pass, which ran on the caller alone after the
// product (reading the other threads' results across cores), is split as the
// product is. Elsewhere the product runs whole and the loop after it.
struct GemmEpilogue {
  device::ParallelTask task = nullptr;
  void* const* buffers = nullptr;
  const int64_t* shapes = nullptr;
  int64_t groups = 1;
  int64_t work = 0;
};

// sgemmPacked (A not transposed, nothing accumulated) followed by `then`; n must be
// a multiple of then.groups.
void sgemmPackedThen(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                     bool transB, const float* packed, float* c, int64_t ldc, const GemmBlocking& blocking,
                     const GemmEpilogue& then);

// Flags bit 4 of the entry points below: run on the calling thread alone (a
// schedule that shares nothing, loop::Schedule::parallel).
constexpr int64_t kGemmFlagSerial = 16;
// Bits 8-11: KC as log2(KC) - 5 (0: the default); bits 12-19: rows per task in
// tiles (0: the default); bits 20-21: the tile; bit 22: pack A; bits 23-24: narrow.
constexpr int kGemmFlagKCShift = 8, kGemmFlagMCShift = 12, kGemmFlagTileShift = 20, kGemmFlagPackAShift = 22,
              kGemmFlagNarrowShift = 23;
inline int64_t gemmBlockingFlags(const GemmBlocking& b) {
  int64_t code = 0;
  while (b.kc > 32 && (int64_t(32) << code) < b.kc) ++code;
  return (b.kc > 0 ? code << kGemmFlagKCShift : 0) | ((b.mcTiles & 0xff) << kGemmFlagMCShift) |
         ((b.tile & 0x3) << kGemmFlagTileShift) | (int64_t(b.packA) << kGemmFlagPackAShift) |
         ((b.narrow & 0x3) << kGemmFlagNarrowShift);
}
inline GemmBlocking gemmBlockingFromFlags(int64_t flags) {
  int64_t code = (flags >> kGemmFlagKCShift) & 0xf;
  return {code ? int64_t(32) << code : 0, (flags >> kGemmFlagMCShift) & 0xff, (flags >> kGemmFlagTileShift) & 0x3,
          ((flags >> kGemmFlagPackAShift) & 1) != 0, (flags >> kGemmFlagNarrowShift) & 0x3};
}

}  // namespace kiln::jit

// The entry point JIT kernels call; flags: bit 0 transA, bit 1 transB, bit 2 accumulate, bit 4 serial,
// bits 8-24 blocking (gemmBlockingFlags), bits 25-30 the grain (device::grainFlags).
// The same with a prepacked B (null: none).
extern "C" void kiln_sgemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                                  const float* packed, float* c, int64_t ldc, int64_t flags);
extern "C" void kiln_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float* c, int64_t ldc, int64_t flags);
// A product followed by a loop that reads it by column groups (GemmEpilogue),
// flags as kiln_sgemm_packed's (A's transpose and accumulation not taken).
extern "C" void kiln_sgemm_packed_then(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                                       int64_t ldb, const float* packed, float* c, int64_t ldc, int64_t flags,
                                       int64_t groups, kiln::device::ParallelTask then, void* const* buffers,
                                       const int64_t* shapes, int64_t work);
// With post-ops (GemmPost): `bias` (n floats) may be null; flags bit 3 is ReLU;
// `packed` may be null.
extern "C" void kiln_sgemm_post(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                                const float* packed, float* c, int64_t ldc, int64_t flags, const float* bias);
