// Two chained convolutions in one call: the first writes its output straight
// into the padded copy the second reads, so the second copies no input rows.
//
// Why: the row path (conv2d_rows.cc) copies the padded rows its tiles read, with
// a stride-2 convolution's columns split by phase. model_bench's CNN spent about
// 10 of its 165 us in the second convolution's copy of the first's output, which
// the first convolution can as well write in that layout as it finishes each
// tile (ONNX Runtime's NCHWc convolutions pass their blocked layout on the same
// way). Elsewhere the pair runs as two sconv2d calls through `between`.
#include "jit/conv2d.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "device/thread_pool.h"
#include "jit/conv2d_internal.h"
#include "jit/gemm_internal.h"

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
                 float* out) {
  if (!chained(a, b)) {
    // The kernel computes both from one value's shape: never met. Nothing is read
    // past either tensor; the output says something went wrong.
    int64_t floats = b.n * b.o * b.oh * b.ow;
    std::fill(out, out + std::max<int64_t>(0, floats), std::numeric_limits<float>::quiet_NaN());
    return;
  }
  // Both filters must be prepacked: per-call packing of either takes the one
  // scratch slot both would need at once.
  bool packed = packedA && packedConvFilterMatches(packedA, a.o, a.c / a.groups * a.kh * a.kw, a.groups) && packedB &&
                packedConvFilterMatches(packedB, b.o, b.c / b.groups * b.kh * b.kw, b.groups);
  if (!packed || !nonEmpty(a) || !nonEmpty(b) || !detail::takesRowPath(a) || !detail::takesRowPath(b) ||
      !detail::rowChainApplies(a, b)) {
    sconv2d(a, x, wa, packedA, between, postA);
    sconv2d(b, between, wb, packedB, out, postB);
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
  // Bit 0: ReLU after the first; bit 1: on the calling thread alone; bit 2: ReLU after the second.
  kiln::device::SerialScope serial((flags & 2) != 0);
  kiln::jit::sconv2dPair(a, x, wa, packedA, kiln::jit::ConvPostOps{biasA, (flags & 1) != 0}, b, wb, packedB,
                         kiln::jit::ConvPostOps{biasB, (flags & 4) != 0}, between, out);
}
