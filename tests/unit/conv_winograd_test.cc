// Stride-2 3x3 convolutions by minimal filtering (jit/conv2d_winograd.cc):
// against the definition on odd shapes, the packed forms' checks, and through a
// compiled program whose filters are constants (prepared with the transform)
// against the same program whose filters are an input (the direct path).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>
#include "jit/conv2d.h"
#include "jit/conv2d_internal.h"
#include "kiln/compile.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"
#include "runtime/kernel_table.h"
#include "test_skip.h"

using namespace kiln;

namespace {

// n images of c x h x w, o filters, padding top/left and bottom/right.
jit::Conv2dDims stride2(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t pad, int64_t padEnd) {
  return jit::Conv2dDims{n, c, h, w, o, 3, 3, (h + pad + padEnd - 3) / 2 + 1, (w + pad + padEnd - 3) / 2 + 1,
                         2, 2, pad, pad, 1, 1, 1};
}

// The convolution by its definition in double, then bias and ReLU (NaN stays).
std::vector<double> reference(const jit::Conv2dDims& d, const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& bias) {
  std::vector<double> out(static_cast<size_t>(d.n * d.o * d.oh * d.ow));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t oy = 0; oy < d.oh; ++oy)
        for (int64_t ox = 0; ox < d.ow; ++ox) {
          double s = bias[static_cast<size_t>(o)];
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                int64_t iy = oy * 2 + ky - d.ph, ix = ox * 2 + kx - d.pw;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                s += double(w[static_cast<size_t>(((o * d.c + c) * 3 + ky) * 3 + kx)]) *
                     x[static_cast<size_t>(((n * d.c + c) * d.h + iy) * d.w + ix)];
              }
          out[static_cast<size_t>(((n * d.o + o) * d.oh + oy) * d.ow + ox)] = std::isnan(s) ? s : std::max(s, 0.0);
        }
  return out;
}

// A 64-byte-aligned buffer of `floats` inside `storage`.
float* aligned(std::vector<float>& storage, int64_t floats) {
  storage.assign(static_cast<size_t>(floats) + 16, -7.0f);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
}

}  // namespace

TEST_CASE("stride-2 minimal filtering: against the definition on odd shapes, with bias and ReLU") {
  if (!__builtin_cpu_supports("avx512f")) return test::skip("the minimal-filtering path needs AVX-512; this CPU lacks it");
  struct Case {
    int64_t n, c, h, w, o, pad, padEnd;
  };
  const Case cases[] = {
      {1, 32, 64, 64, 64, 1, 1},  // model_bench's CNN: 16 tiles a row, one block of strips per 4 tile rows
      {2, 17, 33, 61, 9, 1, 1},   // 17 x 31 outputs: a half tile at the bottom and the right; 9 filters (a partial group)
      {3, 70, 30, 56, 13, 1, 0},  // 70 channels: two chunks of V; no padding at the end; 3 images
      {1, 20, 13, 60, 70, 0, 1},  // 70 filters: two chunks of M; 6 output rows (the block ends early)
      {1, 16, 29, 61, 8, 2, 2},   // padding 2: windows that start two columns out
      {1, 16, 64, 128, 8, 1, 1},  // 64 tiles a row: four strips side by side
  };
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const Case& t : cases) {
    jit::Conv2dDims d = stride2(t.n, t.c, t.h, t.w, t.o, t.pad, t.padEnd);
    CAPTURE(t.n);
    CAPTURE(t.c);
    CAPTURE(t.h);
    CAPTURE(t.w);
    CAPTURE(t.o);
    REQUIRE(jit::detail::winogradApplies(d));  // else this test would check the direct path
    std::vector<float> x(static_cast<size_t>(d.n * d.c * d.h * d.w)), w(static_cast<size_t>(d.o * d.c * 9)),
        bias(static_cast<size_t>(d.o));
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    // A NaN reaches exactly the outputs whose windows read it (the reference's):
    // image 0, channel 1, row 0, column 5.
    x[static_cast<size_t>(d.h * d.w + 5)] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> storage, out(static_cast<size_t>(d.n * d.o * d.oh * d.ow), -3.0f);
    float* packed = aligned(storage, jit::packedConvFilterWithWinogradFloats(d.o, d.c));
    jit::packConvFilterWithWinograd(w.data(), d.o, d.c, packed);
    REQUIRE(jit::winogradFormOf(packed, d.o, d.c) != nullptr);
    jit::sconv2d(d, x.data(), w.data(), packed, out.data(), jit::ConvPostOps{bias.data(), true});
    std::vector<double> want = reference(d, x, w, bias);
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        REQUIRE(std::isnan(out[i]));
        continue;
      }
      REQUIRE(out[i] == doctest::Approx(want[i]).epsilon(1e-4).scale(1.0));
    }
  }
}

TEST_CASE("stride-2 minimal filtering: which convolutions take it, and the packed forms' checks") {
  jit::Conv2dDims d = stride2(1, 32, 64, 64, 64, 1, 1);
  bool avx512 = __builtin_cpu_supports("avx512f");
  CHECK(jit::detail::winogradApplies(d) == avx512);
  jit::Conv2dDims few = stride2(1, 8, 64, 64, 64, 1, 1);  // 8 channels: the direct path is faster
  CHECK_FALSE(jit::detail::winogradApplies(few));
  jit::Conv2dDims narrow = stride2(1, 32, 28, 28, 64, 1, 1);  // 7 tiles a row fill under half a strip
  CHECK_FALSE(jit::detail::winogradApplies(narrow));
  jit::Conv2dDims stride1 = d;
  stride1.sh = stride1.sw = 1;
  stride1.oh = stride1.ow = 64;
  CHECK_FALSE(jit::detail::winogradApplies(stride1));
  jit::Conv2dDims dilated = d;
  dilated.dh = 2;
  CHECK_FALSE(jit::detail::winogradApplies(dilated));

  CHECK(jit::winogradFilterFloats(0, 3) == -1);
  CHECK(jit::winogradFilterFloats(INT64_MAX / 2, 3) == -1);
  CHECK(jit::packedConvFilterWithWinogradFloats(64, INT64_MAX / 4) == -1);
  CHECK(jit::winogradFilterFloats(9, 5) == 16 + 25 * 12 * 5);  // 9 filters take three groups of four
  // The plain packing announces no transform; a combined one for other filters is not taken.
  std::vector<float> w(64 * 32 * 9, 0.5f), plainStorage, bothStorage;
  float* plain = aligned(plainStorage, jit::packedConvFilterFloats(64, 32 * 9, 1));
  jit::packConvFilter(w.data(), 64, 32 * 9, 1, plain);
  CHECK(jit::winogradFormOf(plain, 64, 32) == nullptr);
  float* both = aligned(bothStorage, jit::packedConvFilterWithWinogradFloats(64, 32));
  jit::packConvFilterWithWinograd(w.data(), 64, 32, both);
  CHECK(jit::winogradFormOf(both, 64, 32) != nullptr);
  CHECK(jit::winogradFormOf(both, 63, 32) == nullptr);
  CHECK(jit::winogradFormOf(both, 64, 31) == nullptr);
  CHECK(jit::packedConvFilterMatches(both, 64, 32 * 9, 1));  // the direct path reads its first part
  CHECK(jit::winogradFormOf(nullptr, 64, 32) == nullptr);
}

TEST_CASE("stride-2 minimal filtering: a program's constant filters are prepared with the transform") {
  // Constant filters take the minimal-filtering path; the same filters as an
  // input take the direct one (nothing is prepared for them). A `?` batch.
  constexpr const char* kProgram = R"(
def @main(%img: Tensor[(?, 16, 64, 64), float32], %f: Tensor[(24, 16, 3, 3), float32], %b: Tensor[(24,), float32]) {
  nn.relu(nn.bias_add(nn.conv2d(%img, %f, strides=[2, 2], padding=[1, 1, 1, 1]), %b))
}
)";
  auto fill = [](std::initializer_list<int64_t> shape, float scale) {
    Tensor t = Tensor::empty(kiln::DType::Float32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(static_cast<float>(i) * scale);
    return t;
  };
  Tensor img = fill({2, 16, 64, 64}, 0.37f), f = fill({24, 16, 3, 3}, 0.11f), b = fill({24}, 0.7f);
  kiln::CompileOptions constant;
  constant.params = {{"f", f}, {"b", b}};
  auto prepared = kiln::compile(kProgram, "conv.relay", constant);
  auto direct = kiln::compile(kProgram, "conv.relay");
  auto rt = Runtime::create();
  kiln::VMOptions vo;
  vo.runtime = rt;
  kiln::VirtualMachine vmPrepared(prepared, vo), vmDirect(direct, vo);
  Tensor got = vmPrepared.invoke("main", {Value(img)}).tensor();
  Tensor want = vmDirect.invoke("main", {Value(img), Value(f), Value(b)}).tensor();
  REQUIRE(got.numel() == 2 * 24 * 32 * 32);
  REQUIRE(want.numel() == got.numel());
  for (int64_t i = 0; i < got.numel(); ++i)
    REQUIRE(got.data<float>()[i] == doctest::Approx(want.data<float>()[i]).epsilon(1e-4).scale(1.0));
  auto stats = rt->kernelTable(prepared)->preparedStats();
  CHECK(stats.count == 1);
  // The direct packing and the transform: 25 values per filter and channel beside 9.
  CHECK(stats.bytes >= static_cast<uint64_t>(24 * 16 * (9 + 25)) * sizeof(float));
  CHECK(rt->kernelTable(direct)->preparedStats().count == 0);
}
