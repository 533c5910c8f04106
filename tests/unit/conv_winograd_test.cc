// 3x3 convolutions of stride 1 and 2 by minimal filtering (jit/conv2d_winograd.cc):
// against the definition on odd shapes, the packed forms' checks, and through a
// compiled program whose filters are constants (prepared with the transform)
// against the same program whose filters are an input (the direct path).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>
#include "jit/conv2d.h"
#include "jit/conv2d_internal.h"
#include "kernel_ir/loop_ir.h"
#include "kiln/compile.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"
#include "runtime/kernel_table.h"
#include "conv_reference.h"
#include "test_skip.h"

using namespace kiln;

namespace {

// n images of c x h x w, o 3x3 filters, padding top/left and bottom/right.
jit::Conv2dDims conv3x3(int64_t stride, int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t pad,
                        int64_t padEnd) {
  return jit::Conv2dDims{n,      c,      h,   w,   o, 3, 3, (h + pad + padEnd - 3) / stride + 1,
                         (w + pad + padEnd - 3) / stride + 1, stride, stride, pad, pad, 1, 1, 1};
}
jit::Conv2dDims stride2(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t pad, int64_t padEnd) {
  return conv3x3(2, n, c, h, w, o, pad, padEnd);
}

std::vector<double> reference(const jit::Conv2dDims& d, const auto& x, const std::vector<float>& w,
                              const std::vector<float>& bias) {
  return test::convReference(d, x, w, bias);
}

// A 64-byte-aligned buffer of `floats` inside `storage`.
float* aligned(std::vector<float>& storage, int64_t floats) {
  storage.assign(static_cast<size_t>(floats) + 16, -7.0f);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
}

}  // namespace

TEST_CASE("minimal filtering: against the definition on odd shapes, strides 1 and 2, 2x2 and 4x4 tiles, with bias and ReLU") {
  if (!__builtin_cpu_supports("avx512f")) return test::skip("the minimal-filtering path needs AVX-512; this CPU lacks it");
  struct Case {
    int64_t form, n, c, h, w, o, pad, padEnd;  // form: loop::winogradForm (1 and 2 the stride, 3 for 4x4 tiles)
  };
  const Case cases[] = {
      {2, 1, 32, 64, 64, 64, 1, 1},  // model_bench's CNN: 16 tiles a row, one block of strips per 4 tile rows
      {2, 2, 17, 33, 61, 9, 1, 1},   // 17 x 31 outputs: a half tile at the bottom and the right; 9 filters (a partial group)
      {2, 3, 70, 30, 56, 13, 1, 0},  // 70 channels: two chunks of V; no padding at the end; 3 images
      {2, 1, 20, 13, 60, 70, 0, 1},  // 70 filters: two chunks of M; 6 output rows (the block ends early)
      {2, 1, 16, 29, 61, 8, 2, 2},   // padding 2: windows that start two columns out
      {2, 1, 16, 64, 128, 8, 1, 1},  // 64 tiles a row: four strips side by side
      {1, 1, 64, 56, 56, 64, 1, 1},  // kernel_bench's convolution: 28 tiles a row in two strips
      {1, 2, 19, 27, 27, 10, 1, 1},  // 27 x 27 outputs: half tiles at both ends; 2 images
      {1, 1, 70, 14, 30, 66, 0, 0},  // no padding (12 x 28); two chunks of V and of M
      {1, 1, 16, 9, 29, 8, 2, 1},    // padding 2 and 1: 10 x 30 outputs
      {3, 1, 64, 56, 56, 64, 1, 1},  // 4x4 tiles: kernel_bench's convolution, 14 tiles a row, 7 blocks of two strips
      {3, 2, 19, 27, 63, 10, 1, 1},  // 27 x 63 outputs: partial tiles at the bottom and the right; a block of one strip
      {3, 1, 70, 14, 64, 66, 0, 0},  // no padding (12 x 62); two chunks of V and of M; 17 filter groups (one left alone)
      {3, 1, 16, 9, 61, 8, 2, 1},    // padding 2 and 1: 10 x 62 outputs
      {3, 1, 16, 20, 128, 9, 1, 1},  // 32 tiles a row: two strips side by side; 3 filter groups
  };
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> dist(-1, 1);
  double worst[4] = {};  // per form: the largest error over the sum of the terms' magnitudes
  for (const Case& t : cases) {
    const int64_t stride = loop::winogradFormStride(t.form), tile = loop::winogradFormTile(t.form);
    const auto minimal = tile == 4 ? jit::MinimalFiltering::Tiles4x4 : jit::MinimalFiltering::Tiles2x2;
    jit::Conv2dDims d = conv3x3(stride, t.n, t.c, t.h, t.w, t.o, t.pad, t.padEnd);
    CAPTURE(t.form);
    CAPTURE(t.n);
    CAPTURE(t.c);
    CAPTURE(t.h);
    CAPTURE(t.w);
    CAPTURE(t.o);
    REQUIRE(jit::detail::winogradApplies(d, t.form));  // else this test would check the direct path
    REQUIRE(jit::detail::winogradFormFor(d, minimal) == t.form);
    std::vector<float> x(static_cast<size_t>(d.n * d.c * d.h * d.w)), w(static_cast<size_t>(d.o * d.c * 9)),
        bias(static_cast<size_t>(d.o));
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    // A NaN reaches exactly the outputs whose windows read it (the reference's):
    // image 0, channel 1, row 0, column 5. (With 4x4 tiles it reaches the whole
    // tile: F(4,3)'s transforms mix the six inputs of an axis into every output.)
    if (tile == 2) x[static_cast<size_t>(d.h * d.w + 5)] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> storage, out(static_cast<size_t>(d.n * d.o * d.oh * d.ow), -3.0f), again(out.size(), -3.0f);
    float* packed = aligned(storage, jit::packedConvFilterWithWinogradFloats(d.o, d.c, t.form));
    jit::packConvFilterWithWinograd(w.data(), d.o, d.c, t.form, packed);
    REQUIRE(jit::winogradFormOf(packed, d.o, d.c, t.form) != nullptr);
    for (int64_t other = 1; other <= 3; ++other)  // the other forms are others
      if (other != t.form) REQUIRE(jit::winogradFormOf(packed, d.o, d.c, other) == nullptr);
    jit::sconv2d(d, x.data(), w.data(), packed, out.data(), jit::ConvPostOps{bias.data(), true}, minimal);
    // Filters not prepared: transformed per call where that pays (the same
    // values), else the direct path.
    jit::sconv2d(d, x.data(), w.data(), nullptr, again.data(), jit::ConvPostOps{bias.data(), true}, minimal);
    bool perCall = jit::detail::takesWinograd(d, nullptr, minimal);
    CHECK(perCall == (d.n * ((d.oh + 1) / 2) * ((d.ow + 1) / 2) >= 64));
    std::vector<double> want = reference(d, x, w, bias);
    // The sum of the terms' magnitudes, per output (bias and ReLU aside): what
    // a reassociated float sum's rounding scales with.
    std::vector<float> absX(x.size()), absW(w.size());
    std::transform(x.begin(), x.end(), absX.begin(), [](float v) { return std::isnan(v) ? 0.0f : std::fabs(v); });
    std::transform(w.begin(), w.end(), absW.begin(), [](float v) { return std::fabs(v); });
    std::vector<double> magnitude = reference(d, absX, absW, std::vector<float>(bias.size(), 0.0f));
    for (size_t i = 0; i < want.size(); ++i) {
      if (!std::isnan(want[i]) && want[i] > 0)
        worst[t.form] = std::max(worst[t.form], std::fabs(out[i] - want[i]) / std::max(1.0, magnitude[i]));
      if (std::isnan(want[i])) {
        REQUIRE(std::isnan(out[i]));
        REQUIRE(std::isnan(again[i]));
        continue;
      }
      // 4x4 tiles' rounding, up to about 2e-4 here, scales with the terms'
      // magnitudes (bounded below, with the worst of them).
      if (tile == 4) REQUIRE(std::fabs(out[i] - want[i]) <= 1e-5 * std::max(1.0, magnitude[i]));
      else REQUIRE(out[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1.0));
      if (perCall) REQUIRE(again[i] == out[i]);
      else REQUIRE(again[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1.0));
    }
  }
  // Relative to the terms' magnitudes, the 2x2 forms round as a float sum
  // does; 4x4 tiles further (their transforms scale by up to 8, their filters
  // by sixths), still well inside the checks above.
  MESSAGE("largest error over the terms' magnitudes: 2x2 tiles stride 1 ", worst[1], ", stride 2 ", worst[2],
          ", 4x4 tiles ", worst[3]);
  CHECK(worst[1] < 1e-6);
  CHECK(worst[2] < 1e-6);
  CHECK(worst[3] < 1e-5);
}

TEST_CASE("minimal filtering: a chained pair whose second takes it runs as two calls") {
  if (!__builtin_cpu_supports("avx512f")) return test::skip("the minimal-filtering path needs AVX-512; this CPU lacks it");
  // model_bench's CNN: 3 -> 32 (stride 1, too few channels for it), then 32 -> 64 at stride 2.
  jit::Conv2dDims a = conv3x3(1, 1, 3, 64, 64, 32, 1, 1), b = conv3x3(2, 1, 32, 64, 64, 64, 1, 1);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(3 * 64 * 64), wa(32 * 27), wb(64 * 32 * 9), ba(32), bb(64);
  for (auto* v : {&x, &wa, &wb, &ba, &bb})
    for (float& f : *v) f = dist(rng);
  std::vector<float> pa, pb, between(32 * 64 * 64, -5.0f), out(64 * 32 * 32, -7.0f);
  float* packedA = aligned(pa, jit::packedConvFilterFloats(32, 27, 1));
  jit::packConvFilter(wa.data(), 32, 27, 1, packedA);
  float* packedB = aligned(pb, jit::packedConvFilterWithWinogradFloats(64, 32, 2));
  jit::packConvFilterWithWinograd(wb.data(), 64, 32, 2, packedB);
  REQUIRE(jit::detail::takesWinograd(b, packedB));
  REQUIRE_FALSE(jit::detail::takesWinograd(a, packedA));
  jit::sconv2dPair(a, x.data(), wa.data(), packedA, {ba.data(), true}, b, wb.data(), packedB, {bb.data(), true},
                   between.data(), out.data());
  std::vector<double> mid = reference(a, x, wa, ba);
  for (size_t i = 0; i < mid.size(); ++i) REQUIRE(between[i] == doctest::Approx(mid[i]).epsilon(1e-4).scale(1.0));
  std::vector<float> midFloats(between.begin(), between.end());
  std::vector<double> want = reference(b, midFloats, wb, bb);
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(out[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1.0));
}

TEST_CASE("minimal filtering: the entry point's flag bit 3 (a schedule's winograd=0) keeps a convolution direct") {
  if (!__builtin_cpu_supports("avx512f")) return test::skip("the minimal-filtering path needs AVX-512; this CPU lacks it");
  jit::Conv2dDims d = conv3x3(1, 1, 16, 64, 64, 16, 1, 1);  // 1024 tiles: transformed per call by default
  REQUIRE(jit::detail::takesWinograd(d, nullptr));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(16 * 64 * 64), w(16 * 16 * 9), bias(16), fast(16 * 64 * 64), direct(fast.size()), viaFlag(fast.size());
  for (auto* v : {&x, &w, &bias})
    for (float& f : *v) f = dist(rng);
  int64_t dims[16];
  std::memcpy(dims, &d, sizeof d);
  kiln_sconv2d(dims, x.data(), w.data(), nullptr, fast.data(), bias.data(), 0);
  kiln_sconv2d(dims, x.data(), w.data(), nullptr, viaFlag.data(), bias.data(), 8);
  jit::sconv2d(d, x.data(), w.data(), nullptr, direct.data(), jit::ConvPostOps{bias.data(), false},
               jit::MinimalFiltering::Off);
  std::vector<double> want = reference(d, x, w, bias);
  int64_t rounded = 0;
  for (size_t i = 0; i < fast.size(); ++i) {
    REQUIRE(viaFlag[i] == direct[i]);  // the direct path, bit for bit
    if (want[i] > 0) {  // (the reference applies ReLU; these calls do not)
      REQUIRE(fast[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1.0));
      REQUIRE(direct[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1.0));
    }
    rounded += fast[i] != direct[i];
  }
  CHECK(rounded > 0);  // the two paths sum in another order: some results round apart
}

TEST_CASE("minimal filtering: the entry point's flag bit 4 (a schedule's winograd=4) takes 4x4 tiles at stride 1") {
  if (!__builtin_cpu_supports("avx512f")) return test::skip("the minimal-filtering path needs AVX-512; this CPU lacks it");
  jit::Conv2dDims d = conv3x3(1, 1, 32, 56, 56, 16, 1, 1);
  REQUIRE(jit::detail::winogradFormFor(d, jit::MinimalFiltering::Tiles4x4) == loop::kWinogradF4);
  REQUIRE(jit::detail::takesWinograd(d, nullptr, jit::MinimalFiltering::Tiles4x4));
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(32 * 56 * 56), w(16 * 32 * 9), bias(16), viaFlag(16 * 56 * 56), tiles4(viaFlag.size()),
      tiles2(viaFlag.size());
  for (auto* v : {&x, &w, &bias})
    for (float& f : *v) f = dist(rng);
  int64_t dims[16];
  std::memcpy(dims, &d, sizeof d);
  kiln_sconv2d(dims, x.data(), w.data(), nullptr, viaFlag.data(), bias.data(), jit::kMinimalTiles4x4Flag);
  jit::sconv2d(d, x.data(), w.data(), nullptr, tiles4.data(), {bias.data(), false}, jit::MinimalFiltering::Tiles4x4);
  jit::sconv2d(d, x.data(), w.data(), nullptr, tiles2.data(), {bias.data(), false}, jit::MinimalFiltering::Tiles2x2);
  int64_t rounded = 0;
  for (size_t i = 0; i < viaFlag.size(); ++i) {
    REQUIRE(viaFlag[i] == tiles4[i]);  // the 4x4 path, bit for bit
    REQUIRE(tiles4[i] == doctest::Approx(tiles2[i]).epsilon(1e-3).scale(1.0));
    rounded += tiles4[i] != tiles2[i];
  }
  CHECK(rounded > 0);  // the two forms sum in other orders: some results round apart
  // At stride 2 the flag keeps 2x2 tiles; with bit 3 set too, none.
  CHECK(jit::detail::winogradFormFor(conv3x3(2, 1, 32, 64, 64, 16, 1, 1), jit::MinimalFiltering::Tiles4x4) == 2);
  CHECK(jit::minimalFilteringFromFlags(jit::kMinimalTiles4x4Flag | jit::kMinimalFilteringOffFlag) ==
        jit::MinimalFiltering::Off);
  // 28 outputs a row are 7 4x4 tiles, under half a strip: 2x2 tiles instead.
  CHECK(jit::detail::winogradFormFor(conv3x3(1, 1, 32, 28, 28, 16, 1, 1), jit::MinimalFiltering::Tiles4x4) == 1);
}

TEST_CASE("minimal filtering: which convolutions take it, and the packed forms' checks") {
  jit::Conv2dDims d = stride2(1, 32, 64, 64, 64, 1, 1);
  bool avx512 = __builtin_cpu_supports("avx512f");
  CHECK(jit::detail::winogradApplies(d, 2) == avx512);
  jit::Conv2dDims few = stride2(1, 8, 64, 64, 64, 1, 1);  // 8 channels: the direct path is faster
  CHECK_FALSE(jit::detail::winogradApplies(few, 2));
  jit::Conv2dDims narrow = stride2(1, 32, 28, 28, 64, 1, 1);  // 7 tiles a row fill under half a strip
  CHECK_FALSE(jit::detail::winogradApplies(narrow, 2));
  jit::Conv2dDims stride1 = conv3x3(1, 1, 64, 56, 56, 64, 1, 1);
  CHECK(jit::detail::winogradApplies(stride1, 1) == avx512);
  jit::Conv2dDims stride3 = conv3x3(3, 1, 32, 96, 96, 64, 1, 1);
  CHECK_FALSE(jit::detail::winogradApplies(stride3, 1));
  jit::Conv2dDims mixed = d;
  mixed.sw = 1;
  mixed.ow = 64;
  CHECK_FALSE(jit::detail::winogradApplies(mixed, 2));
  jit::Conv2dDims dilated = d;
  dilated.dh = 2;
  CHECK_FALSE(jit::detail::winogradApplies(dilated, 2));

  CHECK(jit::winogradFilterFloats(0, 3, 2) == -1);
  CHECK(jit::winogradFilterFloats(64, 3, 4) == -1);
  CHECK(jit::winogradFilterFloats(INT64_MAX / 2, 3, 2) == -1);
  CHECK(jit::packedConvFilterWithWinogradFloats(64, INT64_MAX / 4, 1) == -1);
  CHECK(jit::winogradFilterFloats(9, 5, 2) == 16 + 25 * 12 * 5);  // 9 filters take three groups of four
  CHECK(jit::winogradFilterFloats(9, 5, 1) == 16 + 16 * 12 * 5);
  // The plain packing announces no transform; a combined one for other filters is not taken.
  std::vector<float> w(64 * 32 * 9, 0.5f), plainStorage, bothStorage;
  float* plain = aligned(plainStorage, jit::packedConvFilterFloats(64, 32 * 9, 1));
  jit::packConvFilter(w.data(), 64, 32 * 9, 1, plain);
  CHECK(jit::winogradFormOf(plain, 64, 32, 2) == nullptr);
  float* both = aligned(bothStorage, jit::packedConvFilterWithWinogradFloats(64, 32, 2));
  jit::packConvFilterWithWinograd(w.data(), 64, 32, 2, both);
  CHECK(jit::winogradFormOf(both, 64, 32, 2) != nullptr);
  CHECK(jit::winogradFormOf(both, 64, 32, 1) == nullptr);
  CHECK(jit::winogradFormOf(both, 63, 32, 2) == nullptr);
  CHECK(jit::winogradFormOf(both, 64, 31, 2) == nullptr);
  CHECK(jit::packedConvFilterMatches(both, 64, 32 * 9, 1));  // the direct path reads its first part
  CHECK(jit::winogradFormOf(nullptr, 64, 32, 2) == nullptr);
}

TEST_CASE("minimal filtering: a program's constant filters are prepared with the transform, others transformed per call") {
  // A stride-2 and a stride-1 convolution, with filters as constants (prepared
  // with their transforms) and as inputs (transformed per call), both against
  // the definition. A `?` batch.
  constexpr const char* kProgram = R"(
def @main(%img: Tensor[(?, 16, 64, 64), float32], %f: Tensor[(24, 16, 3, 3), float32], %b: Tensor[(24,), float32],
          %g: Tensor[(16, 16, 3, 3), float32]) {
  (nn.relu(nn.bias_add(nn.conv2d(%img, %f, strides=[2, 2], padding=[1, 1, 1, 1]), %b)),
   nn.conv2d(%img, %g, padding=[1, 1, 1, 1]))
}
)";
  auto fill = [](std::initializer_list<int64_t> shape, float scale) {
    Tensor t = Tensor::empty(kiln::DType::Float32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(static_cast<float>(i) * scale);
    return t;
  };
  auto floats = [](const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
  Tensor img = fill({2, 16, 64, 64}, 0.37f), f = fill({24, 16, 3, 3}, 0.11f), b = fill({24}, 0.7f);
  Tensor g = fill({16, 16, 3, 3}, 0.23f);
  kiln::CompileOptions constant;
  constant.params = {{"f", f}, {"b", b}, {"g", g}};
  auto prepared = kiln::compile(kProgram, "conv.relay", constant);
  auto inputs = kiln::compile(kProgram, "conv.relay");
  auto rt = Runtime::create();
  kiln::VMOptions vo;
  vo.runtime = rt;
  kiln::VirtualMachine vmPrepared(prepared, vo), vmInputs(inputs, vo);
  Value fromConstants = vmPrepared.invoke("main", {Value(img)});
  Value fromInputs = vmInputs.invoke("main", {Value(img), Value(f), Value(b), Value(g)});
  jit::Conv2dDims d2 = conv3x3(2, 2, 16, 64, 64, 24, 1, 1), d1 = conv3x3(1, 2, 16, 64, 64, 16, 1, 1);
  std::vector<float> noBias(16, 0.0f);
  std::vector<double> want2 = reference(d2, floats(img), floats(f), floats(b));
  std::vector<double> want1 = reference(d1, floats(img), floats(g), noBias);  // (the reference's ReLU: below)
  for (const Value* r : {&fromConstants, &fromInputs}) {
    Tensor got2 = r->fields()[0].tensor(), got1 = r->fields()[1].tensor();
    REQUIRE(got2.numel() == 2 * 24 * 32 * 32);
    REQUIRE(got1.numel() == 2 * 16 * 64 * 64);
    for (int64_t i = 0; i < got2.numel(); ++i)
      REQUIRE(got2.data<float>()[i] == doctest::Approx(want2[static_cast<size_t>(i)]).epsilon(1e-4).scale(1.0));
    // The stride-1 convolution has no ReLU: where the reference clamped, it is <= 0.
    for (int64_t i = 0; i < got1.numel(); ++i) {
      double w1 = want1[static_cast<size_t>(i)];
      if (w1 > 0) REQUIRE(got1.data<float>()[i] == doctest::Approx(w1).epsilon(1e-4).scale(1.0));
      else REQUIRE(got1.data<float>()[i] <= 1e-4f);
    }
  }
  auto stats = rt->kernelTable(prepared)->preparedStats();
  CHECK(stats.count == 2);
  // Each with the direct packing and the transform: 25 (stride 2) and 16
  // (stride 1) values per filter and channel beside 9.
  CHECK(stats.bytes >= static_cast<uint64_t>(24 * 16 * (9 + 25) + 16 * 16 * (9 + 16)) * sizeof(float));
  CHECK(rt->kernelTable(inputs)->preparedStats().count == 0);
}
