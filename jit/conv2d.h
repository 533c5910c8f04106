// Direct float32 convolution for kernels: NCHW data, OIHW filters, any stride,
// padding, dilation and groups, run on the thread pool.
//
// An implicit GEMM: per image and group, out[Og x P] = W[Og x K] * cols[K x P]
// with K = Cg*KH*KW and P = OH*OW, but the columns are never written out whole
// (no im2col buffer): each NR-wide panel of output pixels gathers its KC-deep
// slice of input windows straight into a packed panel that stays in L1, and the
// GEMM micro-kernel consumes it for every filter tile. Runs of pixels on one
// output row with stride 1 are plain (masked) vector loads; other strides and
// dilations gather. Panels are shared out over the pool.
#pragma once

#include <cstdint>

namespace kiln::jit {

// Sizes and window attributes in the order kiln_sconv2d takes them.
struct Conv2dDims {
  int64_t n, c, h, w;        // input
  int64_t o, kh, kw;         // filters: o x (c / groups) x kh x kw
  int64_t oh, ow;            // output height and width
  int64_t sh, sw;            // strides
  int64_t ph, pw;            // top and left padding (bottom and right only shape oh, ow)
  int64_t dh, dw;            // dilation
  int64_t groups;
};
static_assert(sizeof(Conv2dDims) == 16 * sizeof(int64_t));

// What the convolution applies to each output element as it finishes it, while
// the element is still in L1 (oneDNN calls these post-ops): plus bias[o] when
// `bias` is set, then ReLU as nn.relu computes it (max with 0; NaN stays NaN).
// A separate pass would read and write the whole output again.
struct ConvPostOps {
  const float* bias = nullptr;  // one per output channel
  bool relu = false;
};

// Which minimal filtering (conv2d_winograd.cc) a convolution may take where it
// applies: none (a schedule's winograd=0), 2x2 output tiles (the default), or
// 4x4 tiles at stride 1 where they apply and 2x2 otherwise (winograd=4).
enum class MinimalFiltering : uint8_t { Off, Tiles2x2, Tiles4x4 };

// kiln_sconv2d's flag bits for it: bit 3 none, bit 4 4x4 tiles; neither, the default.
constexpr int64_t kMinimalFilteringOffFlag = 8, kMinimalTiles4x4Flag = 16;
constexpr int64_t minimalFilteringFlags(MinimalFiltering m) {
  return m == MinimalFiltering::Off ? kMinimalFilteringOffFlag : m == MinimalFiltering::Tiles4x4 ? kMinimalTiles4x4Flag : 0;
}
constexpr MinimalFiltering minimalFilteringFromFlags(int64_t flags) {
  return (flags & kMinimalFilteringOffFlag) ? MinimalFiltering::Off
         : (flags & kMinimalTiles4x4Flag)   ? MinimalFiltering::Tiles4x4
                                            : MinimalFiltering::Tiles2x2;
}

// out[n, o, oh, ow] = sum over the window, then the post-ops; `out` is
// overwritten. `packedW` is the filters prepacked by packConvFilter, or null
// (they are packed per call); one made for other filters' shape is ignored.
void sconv2d(const Conv2dDims& d, const float* x, const float* w, const float* packedW, float* out,
             const ConvPostOps& post = {}, MinimalFiltering minimal = MinimalFiltering::Tiles2x2);

// b(a(x)), each with its post-ops, b's input the output of a (b.n == a.n, b.c
// == a.o, b.h == a.oh, b.w == a.ow; otherwise `out` is filled with NaN). Where
// both take the row path with prepacked filters, b's tasks compute the rows of
// a's output they read into their own bands (conv2d_pair.cc) and `between` is
// not touched; otherwise the pair runs as two calls, a's output in `between`
// (n x a.o x a.oh x a.ow floats).
void sconv2dPair(const Conv2dDims& a, const float* x, const float* wa, const float* packedA, const ConvPostOps& postA,
                 const Conv2dDims& b, const float* wb, const float* packedB, const ConvPostOps& postB, float* between,
                 float* out, MinimalFiltering minimal = MinimalFiltering::Tiles2x2);

// Prepacked filters: o filters of k = (c / groups) * kh * kw weights each, in
// the layout sconv2d reads them (per group, KC slices of MR-tall panels), made
// once for a constant weight. A header of kPackedHeaderFloats floats (gemm.h)
// holds (o, k, groups, MR, slice depth) as int64.
int64_t packedConvFilterFloats(int64_t o, int64_t k, int64_t groups);  // -1 on overflow or bad groups
void packConvFilter(const float* w, int64_t o, int64_t k, int64_t groups, float* out);
bool packedConvFilterMatches(const float* packed, int64_t o, int64_t k, int64_t groups);

// Filters of one group, 3x3, transformed for a form of minimal filtering
// (loop::winogradForm: 2x2 tiles at stride 1 or 2, 4x4 at stride 1;
// conv2d_winograd.cc), made once for a constant weight (or per call into
// scratch): a header of kPackedHeaderFloats floats (tag with the form, o, c as
// int64), then 16, 25 or 36 (loop::winogradTileProducts) transformed values per
// filter and input channel. sconv2d takes that path where it applies.
int64_t winogradFilterFloats(int64_t o, int64_t c, int64_t form);  // -1 on overflow or no such form
void packWinogradFilter(const float* w, int64_t o, int64_t c, int64_t form, float* out);
// The transformed values past the header when `packed` holds them for o x c filters and this form, or null.
const float* winogradFilters(const float* packed, int64_t o, int64_t c, int64_t form);

// Both forms in one buffer: packConvFilter's (groups 1), and the Winograd form
// after it, which the first's header announces (slot 5 = the form), so that a
// kernel handed the buffer finds either without knowing its length.
int64_t packedConvFilterWithWinogradFloats(int64_t o, int64_t c, int64_t form);  // 3x3 filters; -1 on overflow
void packConvFilterWithWinograd(const float* w, int64_t o, int64_t c, int64_t form, float* out);
// The Winograd form of `packed` (packed for o x c x 3 x 3 filters) of this form, or null.
const float* winogradFormOf(const float* packed, int64_t o, int64_t c, int64_t form);

}  // namespace kiln::jit

// The entry point JIT kernels call: `dims` holds the 16 fields of Conv2dDims;
// `packedW` and `bias` may be null; `flags` bit 0 is ReLU (ConvPostOps), bit 1
// runs it on the calling thread alone (loop::Schedule::parallel), bit 3 keeps it
// off minimal filtering and bit 4 asks for its 4x4 tiles (loop::Schedule::convWinograd), bits 25-30 the least
// work it shares (device::grainFlags, loop::Schedule::grainShift).
extern "C" void kiln_sconv2d(const int64_t* dims, const float* x, const float* w, const float* packedW, float* out,
                             const float* bias, int64_t flags);

// Two chained convolutions (sconv2dPair): `dims` holds a's 16 fields, then b's;
// `flags` bit 0 is ReLU after a, bits 1, 3 and 4 as kiln_sconv2d's, bit 2 ReLU after b.
extern "C" void kiln_sconv2d_pair(const int64_t* dims, const float* x, const float* wa, const float* packedA,
                                  const float* biasA, const float* wb, const float* packedB, const float* biasB,
                                  float* between, float* out, int64_t flags);
