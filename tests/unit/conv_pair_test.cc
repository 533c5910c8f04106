// Two chained convolutions in one call (jit::sconv2dPair): against the
// definition, on the chained row path and on the two-call fallback.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "device/thread_pool.h"
#include <doctest/doctest.h>
#include "jit/conv2d.h"
#include "conv_reference.h"
#include "test_skip.h"

using namespace kiln;

namespace {

struct Conv {
  int64_t c, o, k, stride, pad, dilation;
};

jit::Conv2dDims dims(int64_t n, int64_t h, int64_t w, const Conv& v) {
  jit::Conv2dDims d{n, v.c, h, w, v.o, v.k, v.k, 0, 0, v.stride, v.stride, v.pad, v.pad, v.dilation, v.dilation, 1};
  d.oh = (h + 2 * v.pad - v.dilation * (v.k - 1) - 1) / v.stride + 1;
  d.ow = (w + 2 * v.pad - v.dilation * (v.k - 1) - 1) / v.stride + 1;
  return d;
}

std::vector<double> reference(const jit::Conv2dDims& d, const auto& x, const std::vector<float>& w,
                              const std::vector<float>& bias) {
  return test::convReference(d, x, w, bias);
}

float* packed(const std::vector<float>& w, const jit::Conv2dDims& d, std::vector<float>& storage) {
  int64_t k = d.c * d.kh * d.kw;
  storage.assign(static_cast<size_t>(jit::packedConvFilterFloats(d.o, k, 1)) + 16, 0.0f);
  auto* at = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
  jit::packConvFilter(w.data(), d.o, k, 1, at);
  return at;
}

}  // namespace

TEST_CASE("chained convolutions: the first computed band by band into the second's copy, as two calls give") {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl"))
    return test::skip("the chained row path needs AVX-512 (F and VL); this CPU lacks it");
  struct Case {
    int64_t n, h, w;
    Conv a, b;
    bool chains;  // runs chained (leaves `between` alone) where the row path runs
  };
  const Case cases[] = {
      {1, 64, 64, {3, 32, 3, 1, 1, 1}, {32, 64, 3, 2, 1, 1}, true},    // model_bench's CNN: a stride-2 consumer
      {2, 30, 30, {5, 12, 3, 1, 1, 1}, {12, 7, 3, 1, 1, 1}, true},     // stride 1, 2 images, 7 filters
      {1, 32, 32, {20, 9, 3, 1, 1, 1}, {9, 10, 3, 2, 2, 2}, true},     // 180 deep first: two slices; dilated, pad 2
      {1, 31, 32, {4, 16, 1, 1, 0, 1}, {16, 8, 3, 2, 0, 1}, true},     // 1x1 first; no padding, 15 wide
      {1, 40, 40, {3, 8, 3, 1, 1, 1}, {8, 8, 3, 2, 1, 1}, false},      // 3 strips a row: two calls
      {1, 20, 20, {3, 8, 3, 1, 1, 1}, {8, 8, 3, 1, 1, 1}, false},      // 20 wide fills too little of 2 strips
  };
  std::mt19937 rng(91);
  std::uniform_real_distribution<float> dist(-1, 1);
  int before = device::numThreads();
  for (int threads : {1, 2}) {
    device::setNumThreads(threads);
    for (const Case& t : cases) {
      CAPTURE(threads);
      CAPTURE(&t - cases);
      jit::Conv2dDims a = dims(t.n, t.h, t.w, t.a), b = dims(t.n, a.oh, a.ow, t.b);
      std::vector<float> x(static_cast<size_t>(t.n * a.c * a.h * a.w)), wa(static_cast<size_t>(a.o * a.c * a.kh * a.kw)),
          wb(static_cast<size_t>(b.o * b.c * b.kh * b.kw)), ba(static_cast<size_t>(a.o)), bb(static_cast<size_t>(b.o));
      for (auto* v : {&x, &wa, &wb, &ba, &bb})
        for (float& f : *v) f = dist(rng);
      x[7] = std::nanf("");  // reaches some of the second's outputs through the first's
      std::vector<double> xd(x.begin(), x.end());
      std::vector<double> mid = reference(a, xd, wa, ba), want = reference(b, mid, wb, bb);
      std::vector<float> pa, pb;
      const float* packedA = packed(wa, a, pa);
      const float* packedB = packed(wb, b, pb);
      const float sentinel = -12345.0f;
      std::vector<float> between(static_cast<size_t>(t.n * a.o * a.oh * a.ow), sentinel), out(want.size(), -7.0f);
      // Minimal filtering off: a second convolution that takes it (transformed per
      // call, its filters prepacked without the transform) runs as two calls.
      jit::sconv2dPair(a, x.data(), wa.data(), packedA, {ba.data(), true}, b, wb.data(), packedB, {bb.data(), true},
                       between.data(), out.data(), jit::MinimalFiltering::Off);
      int64_t wrong = 0, nans = 0, nanWant = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        nanWant += std::isnan(want[i]);
        if (std::isnan(want[i])) nans += std::isnan(out[i]);
        else wrong += !(std::fabs(out[i] - want[i]) <= 1e-4 * std::max(1.0, std::fabs(want[i])));
      }
      CHECK(wrong == 0);
      CHECK(nans == nanWant);
      CHECK(nanWant > 0);
      CHECK(nanWant < static_cast<int64_t>(want.size()));
      bool untouched = std::all_of(between.begin(), between.end(), [&](float v) { return v == sentinel; });
      CHECK(untouched == t.chains);
      // Filters not prepacked: two calls (either may take minimal filtering), the
      // same values within the same tolerance.
      std::vector<float> again(want.size(), -7.0f);
      jit::sconv2dPair(a, x.data(), wa.data(), nullptr, {ba.data(), true}, b, wb.data(), nullptr, {bb.data(), true},
                       between.data(), again.data());
      int64_t differ = 0;
      for (size_t i = 0; i < want.size(); ++i)
        differ += std::isnan(want[i]) ? !std::isnan(again[i])
                                      : !(std::fabs(again[i] - want[i]) <= 1e-4 * std::max(1.0, std::fabs(want[i])));
      CHECK(differ == 0);
    }
  }
  device::setNumThreads(before);
}

TEST_CASE("chained convolutions: a second whose input is not the first's output fills its output with NaN") {
  jit::Conv2dDims a = dims(1, 8, 8, {2, 4, 3, 1, 1, 1}), b = dims(1, 8, 8, {5, 3, 3, 1, 1, 1});  // b reads 5 channels, a makes 4
  std::vector<float> x(2 * 64, 1.0f), wa(4 * 2 * 9, 1.0f), wb(3 * 5 * 9, 1.0f), between(4 * 64), out(3 * 64, 0.0f);
  jit::sconv2dPair(a, x.data(), wa.data(), nullptr, {}, b, wb.data(), nullptr, {}, between.data(), out.data());
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
}
