// The float32 math approximations (jit/vector_math.h) against double-precision
// libm: their stated maximum errors hold over wide ranges, and 0, ±inf, NaN,
// denormals and the largest magnitudes give the right answers.
#include <cfloat>
#include <limits>

#include "codegen/vector_math.h"
#include "kernel_util.h"

using namespace kiln;

namespace {

// Runs `op` on every value through a float32 kernel.
std::vector<float> run(const std::string& op, const std::vector<float>& xs) {
  auto k = test::kernelFrom("def @main(%x: Tensor[(?,), float32]) { " + op + "(%x) }");
  Tensor x = Tensor::empty(DType::Float32, {static_cast<int64_t>(xs.size())});
  std::copy(xs.begin(), xs.end(), x.data<float>());
  std::vector<Tensor> in{x};
  Tensor y = (*k)(in)[0];
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

// A dense sweep of [lo, hi] plus values spread over every binade of the float range.
std::vector<float> sweep(double lo, double hi, int n = 200000) {
  std::vector<float> xs;
  for (int i = 0; i <= n; ++i) xs.push_back(static_cast<float>(lo + (hi - lo) * i / n));
  for (int e = -149; e <= 127; ++e)
    for (double m : {1.0, 1.3, 1.7}) {
      float v = static_cast<float>(std::ldexp(m, e));
      if (v >= lo && v <= hi) xs.push_back(v);
      if (-v >= lo && -v <= hi) xs.push_back(-v);
    }
  return xs;
}

struct ErrorStats {
  double maxRel = 0, maxAbs = 0;
  float worst = 0;
};

// Relative error where the exact result is a normal float; absolute error elsewhere.
ErrorStats measure(const std::vector<float>& xs, const std::vector<float>& ys, double (*exact)(double)) {
  ErrorStats s;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = exact(xs[i]), got = ys[i];
    // Exact results beyond float's range round to infinity; NaN has no error.
    if (std::isnan(want) || std::fabs(want) > FLT_MAX) continue;
    double abs = std::fabs(got - want);
    s.maxAbs = std::max(s.maxAbs, abs);
    if (std::fabs(want) >= FLT_MIN) {
      double rel = abs / std::fabs(want);
      if (rel > s.maxRel) {
        s.maxRel = rel;
        s.worst = xs[i];
      }
    } else {
      CHECK(abs <= 2 * std::numeric_limits<float>::denorm_min());  // denormal results: within 2 steps
    }
  }
  return s;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double logE(double x) { return std::log(x); }
double expE(double x) { return std::exp(x); }
double tanhE(double x) { return std::tanh(x); }
double erfE(double x) { return std::erf(x); }

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("exp: stated error over the whole float range, and special values") {
  auto xs = sweep(-110, 100);
  auto s = measure(xs, run("exp", xs), expE);
  MESSAGE("exp max relative error " << s.maxRel << " at x = " << s.worst);
  CHECK(s.maxRel <= jit::kExpMaxRelError);
  auto sp = run("exp", {0.f, -0.f, kInf, -kInf, kNaN, 88.7f, 89.f, -104.f, FLT_MAX, -FLT_MAX});
  CHECK(sp[0] == 1.f);
  CHECK(sp[1] == 1.f);
  CHECK(sp[2] == kInf);
  CHECK(sp[3] == 0.f);
  CHECK(std::isnan(sp[4]));
  CHECK(sp[5] == doctest::Approx(std::exp(static_cast<double>(88.7f))).epsilon(1e-6));
  CHECK(sp[6] == kInf);
  CHECK(sp[7] == 0.f);
  CHECK(sp[8] == kInf);
  CHECK(sp[9] == 0.f);
}

TEST_CASE("log: stated error over all positive floats, and special values") {
  auto xs = sweep(0, 3.4e38);
  std::vector<float> positive;
  for (float x : xs)
    if (x > 0 && std::fabs(x - 1.0f) > 1e-3f) positive.push_back(x);
  auto s = measure(positive, run("log", positive), logE);
  MESSAGE("log max relative error " << s.maxRel << " at x = " << s.worst);
  CHECK(s.maxRel <= jit::kLogMaxRelError);
  std::vector<float> near1;
  for (int i = -1000; i <= 1000; ++i) near1.push_back(1.0f + static_cast<float>(i) * 1e-6f);
  auto n = measure(near1, run("log", near1), logE);
  CHECK(n.maxAbs <= 1e-7);
  auto sp = run("log", {1.f, 0.f, -0.f, -1.f, kInf, -kInf, kNaN, std::numeric_limits<float>::denorm_min(), FLT_MAX});
  CHECK(sp[0] == 0.f);
  CHECK(sp[1] == -kInf);
  CHECK(sp[2] == -kInf);
  CHECK(std::isnan(sp[3]));
  CHECK(sp[4] == kInf);
  CHECK(std::isnan(sp[5]));
  CHECK(std::isnan(sp[6]));
  CHECK(sp[7] == doctest::Approx(std::log(static_cast<double>(std::numeric_limits<float>::denorm_min()))).epsilon(1e-6));
  CHECK(sp[8] == doctest::Approx(std::log(3.4028234663852886e38)).epsilon(1e-6));
}

TEST_CASE("tanh and sigmoid: stated error, saturation, special values") {
  auto xs = sweep(-100, 100);
  auto t = measure(xs, run("tanh", xs), tanhE);
  MESSAGE("tanh max relative error " << t.maxRel << " at x = " << t.worst);
  CHECK(t.maxRel <= jit::kTanhMaxRelError);
  auto g = measure(xs, run("sigmoid", xs), sigmoid);
  MESSAGE("sigmoid max relative error " << g.maxRel << " at x = " << g.worst);
  CHECK(g.maxRel <= jit::kSigmoidMaxRelError);
  auto st = run("tanh", {0.f, -0.f, kInf, -kInf, kNaN, 1e-30f, FLT_MAX});
  CHECK(st[0] == 0.f);
  CHECK(std::signbit(st[1]));
  CHECK(st[2] == 1.f);
  CHECK(st[3] == -1.f);
  CHECK(std::isnan(st[4]));
  CHECK(st[5] == 1e-30f);
  CHECK(st[6] == 1.f);
  auto sg = run("sigmoid", {0.f, kInf, -kInf, kNaN, -FLT_MAX});
  CHECK(sg[0] == 0.5f);
  CHECK(sg[1] == 1.f);
  CHECK(sg[2] == 0.f);
  CHECK(std::isnan(sg[3]));
  CHECK(sg[4] == 0.f);
}

TEST_CASE("erf: stated error, tails, special values") {
  auto xs = sweep(-100, 100);
  auto s = measure(xs, run("erf", xs), erfE);
  MESSAGE("erf max absolute error " << s.maxAbs << ", max relative " << s.maxRel << " at x = " << s.worst);
  CHECK(s.maxAbs <= jit::kErfMaxAbsError);
  std::vector<float> small;
  for (float x : xs)
    if (std::fabs(x) < 1) small.push_back(x);
  CHECK(measure(small, run("erf", small), erfE).maxRel <= jit::kErfMaxAbsError);
  auto sp = run("erf", {0.f, -0.f, kInf, -kInf, kNaN, 1e-30f});
  CHECK(sp[0] == 0.f);
  CHECK(std::signbit(sp[1]));
  CHECK(sp[2] == 1.f);
  CHECK(sp[3] == -1.f);
  CHECK(std::isnan(sp[4]));
  CHECK(sp[5] == doctest::Approx(1.1283791e-30).epsilon(1e-6));
}
