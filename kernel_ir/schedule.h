// Schedules: how a kernel's loops are arranged and compiled, as a point of a
// search space the tuner (tools/kiln_tune.cc) explores and the JIT applies.
//
// A Schedule never changes what a kernel computes, only how: the loop-nest
// transforms (tiling, loop order) are applied to the LoopKernel only where they
// are legal (applySchedule checks), and the rest are code-generation choices
// (vector width, interleaving, unrolling, whether parallel loops and the runtime
// GEMM and convolution share work among threads, the smallest work worth
// sharing, the convolution algorithm). The default-constructed Schedule is what
// Kiln compiles with no tuning: one point of every kernel's space, so a tuned
// kernel is never worse than the default by construction of the search.
//
// The text form (`toString`, `parse`) is one token, `k=v` pairs joined by `,`,
// naming only what differs from the default ("default" when nothing does); it is
// what tuning logs hold and what a kernel's cache key carries, so the default
// schedule leaves today's keys unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::loop {

struct LoopKernel;

struct Schedule {
  // Loop nests (a top-level perfect nest of loops over element-wise stores):
  // `order[i]` is the original loop placed at depth i (empty: as lowered), and
  // `tile[i]` splits the original loop i into tiles of that many iterations
  // (0: not split); split loops' tile loops go outside all point loops.
  std::vector<int32_t> order;
  std::vector<int64_t> tile;
  // Vectorized loops: lanes (0: the target's choice) and vector iterations per trip.
  int32_t vectorWidth = 0;
  int32_t interleave = 1;
  // Serial innermost loops: unroll count (0: LLVM's choice; 1: never).
  int32_t unroll = 0;
  // Whether parallel loops, GEMMs and convolutions share their work among the
  // pool's threads, and the least work (elements touched) a loop shares:
  // device::kMinParallelWork scaled by 2^grainShift (for the runtime's GEMMs
  // and convolutions too, through device::GrainScope).
  bool parallel = true;
  int32_t grainShift = 0;
  // Convolutions: the runtime's direct convolution (true) or an unfold into a
  // column buffer and a GEMM.
  bool directConv = true;
  // Direct convolutions of 3x3 filters: minimal filtering (jit/conv2d_winograd.cc)
  // where the runtime finds that it applies and pays, with output tiles 2 (the
  // default) or 4 (stride 1 only; 2 at stride 2) on a side, or never (0). 4x4
  // tiles take 36 products where 2x2 take 64, but round ten times as far from
  // the direct sum, and spread a NaN input across their tile.
  int32_t convWinograd = 2;
  // GEMMs of many rows (jit::GemmBlocking): the contraction slice KC (64..1024,
  // where B is prepacked) and the rows each task takes, in micro-kernel tiles
  // (0: the runtime's choice).
  int32_t gemmKC = 0;
  int32_t gemmMCTiles = 0;
  // GEMMs' micro-kernel tile (MR x NR, jit::detail::isa(tile)): 0 the machine's
  // default, 1 the wide one (AVX-512: 6 x 64 against 8 x 32; the default where a
  // machine has no other). B prepacked for a kernel is packed for its tile.
  int32_t gemmTile = 0;
  // GEMMs pack A into MR-tall panels even where the tile could read a row-major
  // A in place.
  bool gemmPackA = false;
  // GEMMs of few columns: 0 the runtime's choice, 1 the panel kernels, 2 inner
  // products along the contraction where they apply (jit::GemmBlocking::narrow).
  int32_t gemmNarrow = 0;
  // Vector stores of outputs the kernel never reads back bypass the caches
  // (non-temporal, where the address is aligned to the vector;
  // codegen/streaming_stores.h), for outputs too large to be read back from
  // cache: they skip the read a cached store makes of every line it writes.
  bool streamingStores = false;
  // A loop after a one-row GEMM that reads it by column groups (an LSTM step's
  // gates: kernel_ir/gemm_epilogue.h) runs in the GEMM's threads, each thread on
  // the columns it made; false: on the calling thread after the whole product.
  bool gemmThenInThreads = true;

  bool isDefault() const { return toString() == "default"; }
  std::string toString() const;
  // The text form back; nullopt (and `error` set) when it is not one.
  static std::optional<Schedule> parse(std::string_view text, std::string* error = nullptr);
  bool operator==(const Schedule& o) const { return toString() == o.toString(); }
};

// The least output (bytes, all of a task's outputs) for which the tuner tries
// streaming stores: a smaller one is likely still in cache when the next kernel
// reads it, which a store around the caches would throw away.
constexpr double kStreamingStoresLeastBytes = 8.0 * (1 << 20);

// The most columns a GEMM's inner-product path takes (jit/gemm_dot.cc).
constexpr int64_t kNarrowGemmMostColumns = 32;

// What a kernel's schedule space offers: the depth of its transformable nests,
// whether it has vector loops, parallel loops, GEMMs and convolutions.
struct ScheduleSpace {
  int32_t nestDepth = 0;               // of the deepest transformable nest (0: none)
  std::vector<int64_t> nestExtents;    // its loops' static extents (-1: dynamic)
  bool hasVectorLoops = false;
  bool hasSerialInner = false;
  bool hasParallel = false;            // parallel loops, GEMMs or convolutions
  bool hasGemm = false;
  // A GEMM that inner products could run (narrow=): a row-major A, a B stored
  // transposed, and at most kNarrowGemmMostColumns columns (or `?` of them).
  bool hasNarrowGemm = false;
  bool hasConv = false;
  // A direct convolution that may take minimal filtering (3x3 filters of one
  // group, equal strides of 1 or 2, no dilation): the winograd= knob.
  bool hasWinogradConv = false;
  // One of them at stride 1, which 4x4 output tiles may take (winograd=4).
  bool hasWinogradTiles4x4 = false;
  // Vectorized loops that store (the streaming-stores knob). The tuner offers
  // the knob only for tasks whose outputs are at least kStreamingStoresLeastBytes.
  bool hasVectorStores = false;
  // A GEMM and a loop after it that may run in the GEMM's threads (then=).
  bool hasGemmThen = false;
  // How many independent knobs the space has (0: nothing to tune).
  int dimensions() const;

  // A uniformly chosen point, and a neighbour of `s` (one knob changed).
  Schedule sample(std::mt19937_64& rng) const;
  Schedule mutate(const Schedule& s, std::mt19937_64& rng) const;
};

ScheduleSpace scheduleSpaceOf(const LoopKernel& k);

// Applies the loop-nest part of `s` to `k` where legal (a nest it does not fit
// is left as it is) and records the code-generation part in k.schedule.
void applySchedule(LoopKernel& k, const Schedule& s);

}  // namespace kiln::loop
