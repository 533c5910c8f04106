// A convolution by its definition, for tests of the convolution paths: NCHW
// data, OIHW filters of one group, any stride, padding and dilation, summed in
// double, then bias and ReLU (max with 0; a NaN in a window stays NaN).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "jit/conv2d.h"

namespace kiln::test {

template <class T>
std::vector<double> convReference(const jit::Conv2dDims& d, const std::vector<T>& x, const std::vector<float>& w,
                                  const std::vector<float>& bias) {
  std::vector<double> out(static_cast<size_t>(d.n * d.o * d.oh * d.ow));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t oy = 0; oy < d.oh; ++oy)
        for (int64_t ox = 0; ox < d.ow; ++ox) {
          double s = bias[static_cast<size_t>(o)];
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t ky = 0; ky < d.kh; ++ky)
              for (int64_t kx = 0; kx < d.kw; ++kx) {
                int64_t iy = oy * d.sh + ky * d.dh - d.ph, ix = ox * d.sw + kx * d.dw - d.pw;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                s += double(w[static_cast<size_t>(((o * d.c + c) * d.kh + ky) * d.kw + kx)]) *
                     double(x[static_cast<size_t>(((n * d.c + c) * d.h + iy) * d.w + ix)]);
              }
          out[static_cast<size_t>(((n * d.o + o) * d.oh + oy) * d.ow + ox)] = std::isnan(s) ? s : std::max(s, 0.0);
        }
  return out;
}

}  // namespace kiln::test
