// Two chained convolutions in one call: the first's output rows are computed
// by the second's tasks, into the bands of padded rows they read, instead of
// being written out whole and copied back in.
//
// Why: the row path (conv2d_rows.cc) copies the padded rows its tiles read, a
// stride-2 convolution's columns split by phase. For model_bench's CNN that
// copy of the first convolution's 512 KB output took about 14 of the second's
// 165 us (one thread), and the first wrote the output only for it to be read
// back. Computed band by band, the first's output stays in the L1/L2 of the
// thread that reads it: the pair took 185-188 us against 192-197 as two calls.
// (A first version wrote the whole padded copy, 666 KB, before the second ran:
// 204 us, the copy no longer in L2 when read.) ONNX Runtime's NCHWc
// convolutions avoid the copy the same way, by passing their layout on.
#include "jit/conv2d.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "device/thread_pool.h"
#include "jit/conv2d_internal.h"

namespace kiln::jit {

namespace {

bool chained(const Conv2dDims& a, const Conv2dDims& b) {
  return a.n == b.n && a.o == b.c && a.oh == b.h && a.ow == b.w;
}

bool nonEmpty(const Conv2dDims& d) {
  return d.n > 0 && d.c > 0 && d.o > 0 && d.oh > 0 && d.ow > 0 && d.kh > 0 && d.kw > 0;
}

}  // namespace

void sconv2dPair(const Conv2dDims& a, const float* x, const float* wa, const float* packedA, const ConvPostOps& postA,
                 const Conv2dDims& b, const float* wb, const float* packedB, const ConvPostOps& postB, float* between,
                 float* out, MinimalFiltering minimal) {
  if (!chained(a, b)) {
    // The kernel computes both from one value's shape: never met. Nothing is read
    // past either tensor; the output says something went wrong.
    int64_t planes = 0, rows = 0, floats = 0;
    if (__builtin_mul_overflow(b.n, b.o, &planes) || __builtin_mul_overflow(planes, b.oh, &rows) ||
        __builtin_mul_overflow(rows, b.ow, &floats))
      return;
    std::fill(out, out + std::max<int64_t>(0, floats), std::numeric_limits<float>::quiet_NaN());
    return;
  }
  // Both filters must be prepacked: per-call packing of either takes the one
  // scratch slot both would need at once.
  auto prepacked = [](const Conv2dDims& d, const float* packed) {
    return packed && packedConvFilterMatches(packed, d.o, d.c / d.groups * d.kh * d.kw, d.groups);
  };
  // A second convolution that takes the minimal-filtering path saves more
  // than the chaining does (conv2d_winograd.cc): the pair runs as two calls.
  bool winograd = detail::takesWinograd(b, packedB, minimal);
  if (winograd || !nonEmpty(a) || !nonEmpty(b) || !detail::rowChainApplies(a, b) || !prepacked(a, packedA) ||
      !prepacked(b, packedB) || !detail::takesRowPath(a) || !detail::takesRowPath(b)) {
    sconv2d(a, x, wa, packedA, between, postA, minimal);
    sconv2d(b, between, wb, packedB, out, postB, minimal);
    return;
  }
  detail::RowConv first{a, x, nullptr, 0, 0, postA}, second{b, nullptr, nullptr, 0, 0, postB};
  first.filters = detail::convFilters(a, wa, packedA, first.mpad, first.slice);
  second.filters = detail::convFilters(b, wb, packedB, second.mpad, second.slice);
  detail::rowConv2dChained(first, second, out);
}

}  // namespace kiln::jit

extern "C" void kiln_sconv2d_pair(const int64_t* dims, const float* x, const float* wa, const float* packedA,
                                  const float* biasA, const float* wb, const float* packedB, const float* biasB,
                                  float* between, float* out, int64_t flags) {
  kiln::jit::Conv2dDims a, b;
  std::memcpy(&a, dims, sizeof a);
  std::memcpy(&b, dims + 16, sizeof b);
  // Bit 0: ReLU after the first; bit 1: on the calling thread alone; bit 2: ReLU
  // after the second; bits 3 and 4: minimal filtering (kiln_sconv2d's).
  kiln::device::underScopes((flags & 2) != 0, kiln::device::grainFromFlags(flags) /* bits 25-30 */, [&] {
    kiln::jit::sconv2dPair(a, x, wa, packedA, kiln::jit::ConvPostOps{biasA, (flags & 1) != 0}, b, wb, packedB,
                           kiln::jit::ConvPostOps{biasB, (flags & 4) != 0}, between, out, kiln::jit::minimalFilteringFromFlags(flags));
  });
}
