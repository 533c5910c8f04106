// Pieces the convolution's two AVX-512 paths share (conv2d.cc gathers panels,
// conv2d_rows.cc reads rows of a padded copy): the masked column load, and the
// row path's entry points. Internal to jit/.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "jit/conv2d.h"

namespace kiln::jit::detail {

// Input columns [first, first + 16) of a row `width` wide; columns outside it
// read as zero and are neither read nor faulted on (masked load). The address
// of a column left of the row is formed as an integer, never as a pointer.
__attribute__((target("avx512f"), always_inline)) inline __m512 loadColumns512(const float* row, int64_t first, int64_t width) {
  __m512i col = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                 _mm512_set1_epi32(static_cast<int32_t>(first)));
  __mmask16 m = _mm512_cmpge_epi32_mask(col, _mm512_setzero_si512()) &
                _mm512_cmplt_epi32_mask(col, _mm512_set1_epi32(static_cast<int32_t>(width)));
  const float* at = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(first * 4));
  return _mm512_maskz_loadu_ps(m, at);
}

// Whether the row path takes this convolution: an AVX-512 machine, a column
// stride of 1 or 2, output rows that fill most of their 16-lane strips, and a
// padded image small enough to copy and to address in 32 bits.
bool rowConvApplies(const Conv2dDims& d);

// The filters as sconv2d reads them: `packedW` past its header when it was
// packed for this convolution, otherwise `w` packed now into the calling
// thread's scratch (slot 0). Sets the rows a group's panels take and the slice depth.
const float* convFilters(const Conv2dDims& d, const float* w, const float* packedW, int64_t& mpad, int64_t& slice);

// Whether sconv2d takes the row path for d on this machine.
bool takesRowPath(const Conv2dDims& d);

// The convolution through the row path. `filters` are packed as sconv2d packs
// them (per group, slices `slice` deep of 8-row panels, `mpad` rows a group).
void rowConv2d(const Conv2dDims& d, const float* x, const float* filters, int64_t mpad, int64_t slice, float* out,
               const ConvPostOps& post);

// One convolution of a chained pair, as rowConv2d takes it.
struct RowConv {
  Conv2dDims d;
  const float* x;  // the first's input (the second's is the first's output)
  const float* filters;
  int64_t mpad, slice;
  ConvPostOps post;
};

// Whether rowConv2dChained takes a pair whose convolutions both take the row
// path: b's input is a's output, and neither has groups.
bool rowChainApplies(const Conv2dDims& a, const Conv2dDims& b);

// b(a(x)) through the row path without a's output ever written whole: each of
// b's tasks computes the rows of a's output its band holds straight into the
// band, in the padded, phase-split layout the band's copy would have.
void rowConv2dChained(const RowConv& a, const RowConv& b, float* out);

// Whether the minimal-filtering path (conv2d_winograd.cc) takes d in this form
// (loop::winogradForm): an AVX-512 machine, 3x3 filters of one group, 16 or
// more channels and 8 or more filters, the form's stride both ways, no
// dilation, and output rows whose tiles fill most of their 16-tile strips.
bool winogradApplies(const Conv2dDims& d, int64_t form);

// The form sconv2d takes for d where minimal filtering may be `minimal`, or 0
// for none: 4x4 tiles where asked for and they apply, else 2x2 where they apply.
int64_t winogradFormFor(const Conv2dDims& d, MinimalFiltering minimal);

// Whether sconv2d takes that path for d with this `packedW`: where a form
// applies, with filters prepared with its transform, or with enough tiles to
// pay for transforming them per call.
bool takesWinograd(const Conv2dDims& d, const float* packedW, MinimalFiltering minimal = MinimalFiltering::Tiles2x2);

// d through that path in a form that applies, with filters transformed by
// packWinogradFilter for it (`u` past its header).
void winogradConv2d(const Conv2dDims& d, const float* x, const float* u, float* out, const ConvPostOps& post,
                    int64_t form);

}  // namespace kiln::jit::detail
