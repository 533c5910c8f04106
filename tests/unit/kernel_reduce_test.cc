// Reductions, scans and normalizations against plain reference loops: every
// reduction with axis / keepdims / exclude variants, empty reductions, ties in
// arg-reductions, cumsum, softmax, log_softmax, layer_norm and bias_add.
#include <cfloat>
#include <limits>

#include "kernel_ir/lower.h"
#include "device/thread_pool.h"
#include "kernel_util.h"

using namespace kiln;
using test::getElement;

namespace {

std::string ttype(DType dt, std::initializer_list<int64_t> dims, bool dynamicFirst = false) {
  std::string s = "Tensor[(";
  size_t i = 0;
  for (int64_t d : dims) {
    s += (i ? ", " : "") + ((i == 0 && dynamicFirst) ? std::string("?") : std::to_string(d));
    ++i;
  }
  if (dims.size() == 1) s += ",";
  return s + "), " + std::string(dtypeName(dt)) + "]";
}

// Reference reduction: output in row-major order over kept dims.
std::vector<double> refReduce(const Tensor& x, const std::vector<bool>& reduced, const std::string& op) {
  const Shape& s = x.shape();
  size_t rank = s.size();
  std::vector<int64_t> outDims;
  for (size_t d = 0; d < rank; ++d)
    if (!reduced[d]) outDims.push_back(s[d]);
  int64_t outN = 1;
  for (int64_t d : outDims) outN *= d;
  std::vector<double> acc(static_cast<size_t>(outN));
  std::vector<double> best(static_cast<size_t>(outN));
  std::vector<int64_t> pos(static_cast<size_t>(outN), 0), count(static_cast<size_t>(outN), 0);
  double init = op == "sum" || op == "mean" || op == "any" ? 0 : op == "prod" || op == "all" ? 1
              : op == "max" ? -std::numeric_limits<double>::infinity()
                            : std::numeric_limits<double>::infinity();
  std::fill(acc.begin(), acc.end(), init);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, o = 0, stride = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t id = rem % s[d];
      rem /= s[d];
      if (!reduced[d]) {
        o += id * stride;
        stride *= s[d];
      }
    }
    double v = getElement(x, i);
    auto u = static_cast<size_t>(o);
    if (op == "sum" || op == "mean") acc[u] += v;
    else if (op == "prod") acc[u] *= v;
    else if (op == "max") acc[u] = std::max(acc[u], v);
    else if (op == "min") acc[u] = std::min(acc[u], v);
    else if (op == "all") acc[u] = acc[u] != 0 && v != 0;
    else if (op == "any") acc[u] = acc[u] != 0 || v != 0;
    else {  // argmax / argmin: first extreme, position counted over the reduced elements
      bool better = count[u] == 0 || (op == "argmax" ? v > best[u] : v < best[u]);
      if (better) {
        best[u] = v;
        pos[u] = count[u];
      }
      ++count[u];
    }
    if (op == "mean") ++count[u];
  }
  for (size_t u = 0; u < acc.size(); ++u) {
    if (op == "mean") acc[u] /= static_cast<double>(count[u]);
    if (op == "argmax" || op == "argmin") acc[u] = static_cast<double>(pos[u]);
  }
  return acc;
}

std::vector<bool> mask(size_t rank, std::initializer_list<int> axes, bool exclude = false) {
  std::vector<bool> m(rank, false);
  for (int a : axes) m[static_cast<size_t>(a < 0 ? a + static_cast<int>(rank) : a)] = true;
  if (axes.size() == 0) std::fill(m.begin(), m.end(), true);
  if (exclude) m.flip();
  return m;
}

void checkClose(const Tensor& got, const std::vector<double>& want, DType dt) {
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    double w = want[i];
    if (dt == DType::Float32 && std::isfinite(w)) CHECK(getElement(got, static_cast<int64_t>(i)) == doctest::Approx(w).epsilon(1e-5));
    else if (dt == DType::Float16 && std::isfinite(w)) CHECK(getElement(got, static_cast<int64_t>(i)) == doctest::Approx(w).epsilon(1e-2));
    else CHECK(test::closeTo(getElement(got, static_cast<int64_t>(i)), w, dt));
  }
}

}  // namespace

TEST_CASE("reductions over every axis choice and dtype match the reference") {
  std::mt19937 rng(21);
  struct AxisCase {
    const char* attrs;
    std::initializer_list<int> axes;
    bool exclude;
  };
  const AxisCase axisCases[] = {
      {"", {}, false},
      {", axis=[1]", {1}, false},
      {", axis=[-1], keepdims=True", {-1}, false},
      {", axis=[0, 2]", {0, 2}, false},
      {", axis=[1], exclude=True", {1}, true},
      {", axis=[1, 2], keepdims=True", {1, 2}, false},  // trailing static axes: one merged variable
  };
  const char* ops[] = {"sum", "mean", "max", "min", "prod", "argmax", "argmin"};
  for (const char* op : ops) {
    for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::UInt8, DType::Float16}) {
      if (std::string(op) == "prod" && dt == DType::UInt8) continue;  // wraps; covered by int32
      for (const AxisCase& ac : axisCases) {
        CAPTURE(std::string(op));
        CAPTURE(dtypeName(dt));
        CAPTURE(std::string(ac.attrs));
        auto k = test::kernelFrom("def @main(%x: " + ttype(dt, {3, 4, 5}, true) + ") { " + op + "(%x" + ac.attrs + ") }");
        Tensor x = test::randomTensor(dt, {3, 4, 5}, rng, std::string(op) == "prod" ? 0.5 : -3, std::string(op) == "prod" ? 1.5 : 3);
        // int32 products of -1, 1 and 2: powers of two, exact in the double reference even where they wrap.
        if (dt == DType::Int32 && std::string(op) == "prod")
          for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = (i * 7) % 3 == 0 ? -1 : (i * 7) % 3 == 1 ? 1 : 2;
        std::vector<Tensor> in{x};
        Tensor y = (*k)(in)[0];
        std::vector<double> want = refReduce(x, mask(3, ac.axes, ac.exclude), op);
        if (dt == DType::Int32 && std::string(op) == "mean")
          for (double& w : want) w = std::trunc(w);  // integer mean divides like C
        if (dt == DType::Int32 && std::string(op) == "prod")
          for (double& w : want) w = static_cast<int32_t>(static_cast<int64_t>(w));  // wraps like int32
        bool arg = std::string(op).rfind("arg", 0) == 0;
        if (!arg && dt == DType::UInt8 && std::string(op) == "mean")
          for (double& w : want) w = std::trunc(w);
        if (!arg && dt == DType::UInt8 && std::string(op) == "sum")
          for (double& w : want) w = static_cast<uint8_t>(static_cast<int64_t>(w));
        checkClose(y, want, arg ? DType::Int32 : dt);
      }
    }
  }
}

TEST_CASE("all, any, empty reductions and ties") {
  std::mt19937 rng(4);
  for (const char* op : {"all", "any"}) {
    auto k = test::kernelFrom(std::string("def @main(%x: Tensor[(?, 6), bool]) { ") + op + "(%x, axis=[1]) }");
    Tensor x = test::randomTensor(DType::Bool, {5, 6}, rng);
    std::vector<Tensor> in{x};
    checkClose((*k)(in)[0], refReduce(x, mask(2, {1}), op), DType::Bool);
  }
  // Reducing an empty axis gives the identity; arg-reductions give 0.
  auto sum = test::kernelFrom("def @main(%x: Tensor[(3, ?), float32]) { (sum(%x, axis=[1]), max(%x, axis=[1]), argmax(%x, axis=[1])) }");
  std::vector<Tensor> empty{Tensor::empty(DType::Float32, {3, 0})};
  auto outs = (*sum)(empty);
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(getElement(outs[0], i) == 0);
    CHECK(getElement(outs[1], i) == -std::numeric_limits<double>::infinity());
    CHECK(getElement(outs[2], i) == 0);
  }
  // The first of equal extremes wins.
  auto am = test::kernelFrom("def @main(%x: Tensor[(6,), int32]) { (argmax(%x), argmin(%x)) }");
  Tensor t = Tensor::empty(DType::Int32, {6});
  int32_t vals[] = {1, 7, 3, 7, -2, -2};
  std::copy(vals, vals + 6, t.data<int32_t>());
  std::vector<Tensor> ti{t};
  auto r = (*am)(ti);
  CHECK(getElement(r[0], 0) == 1);
  CHECK(getElement(r[1], 0) == 4);
}

TEST_CASE("cumsum along an axis and flattened, inclusive and exclusive") {
  std::mt19937 rng(8);
  Tensor x = test::randomTensor(DType::Float32, {3, 4}, rng);
  std::vector<Tensor> in{x};
  auto k1 = test::kernelFrom("def @main(%x: Tensor[(?, 4), float32]) { cumsum(%x, axis=1) }");
  auto k2 = test::kernelFrom("def @main(%x: Tensor[(?, 4), float32]) { cumsum(%x, axis=0, exclusive=True) }");
  auto k3 = test::kernelFrom("def @main(%x: Tensor[(?, 4), float32]) { cumsum(%x, dtype=\"float64\") }");
  Tensor a = (*k1)(in)[0], b = (*k2)(in)[0], c = (*k3)(in)[0];
  CHECK(c.dtype() == DType::Float64);
  double flat = 0;
  for (int64_t i = 0; i < 3; ++i) {
    double row = 0;
    for (int64_t j = 0; j < 4; ++j) {
      row += getElement(x, i * 4 + j);
      flat += getElement(x, i * 4 + j);
      double col = 0;
      for (int64_t r = 0; r < i; ++r) col += getElement(x, r * 4 + j);
      CHECK(getElement(a, i * 4 + j) == doctest::Approx(row).epsilon(1e-5));
      CHECK(getElement(b, i * 4 + j) == doctest::Approx(col).epsilon(1e-5));
      CHECK(getElement(c, i * 4 + j) == doctest::Approx(flat).epsilon(1e-5));
    }
  }
}

TEST_CASE("softmax, log_softmax, layer_norm and bias_add") {
  std::mt19937 rng(12);
  Tensor x = test::randomTensor(DType::Float32, {4, 7}, rng, -20, 20);
  std::vector<Tensor> in{x};
  for (int axis : {-1, 0}) {
    auto sm = test::kernelFrom("def @main(%x: Tensor[(?, 7), float32]) { (nn.softmax(%x, axis=" + std::to_string(axis) +
                               "), nn.log_softmax(%x, axis=" + std::to_string(axis) + ")) }");
    auto outs = (*sm)(in);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 7; ++j) {
        double m = -1e300, s = 0;
        int64_t n = axis == 0 ? 4 : 7;
        for (int64_t k = 0; k < n; ++k) m = std::max(m, getElement(x, axis == 0 ? k * 7 + j : i * 7 + k));
        for (int64_t k = 0; k < n; ++k) s += std::exp(getElement(x, axis == 0 ? k * 7 + j : i * 7 + k) - m);
        double v = getElement(x, i * 7 + j);
        CHECK(getElement(outs[0], i * 7 + j) == doctest::Approx(std::exp(v - m) / s).epsilon(1e-5));
        CHECK(getElement(outs[1], i * 7 + j) == doctest::Approx(v - m - std::log(s)).epsilon(1e-5));
      }
  }
  auto ln = test::kernelFrom("def @main(%x: Tensor[(?, 7), float32], %g: Tensor[(7,), float32], %b: Tensor[(7,), float32]) {"
                             " nn.layer_norm(%x, %g, %b, epsilon=1e-05f) }");
  Tensor g = test::randomTensor(DType::Float32, {7}, rng), b = test::randomTensor(DType::Float32, {7}, rng);
  std::vector<Tensor> lin{x, g, b};
  Tensor y = (*ln)(lin)[0];
  for (int64_t i = 0; i < 4; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < 7; ++j) mean += getElement(x, i * 7 + j) / 7;
    for (int64_t j = 0; j < 7; ++j) var += std::pow(getElement(x, i * 7 + j) - mean, 2) / 7;
    for (int64_t j = 0; j < 7; ++j) {
      double want = (getElement(x, i * 7 + j) - mean) / std::sqrt(var + 1e-5) * getElement(g, j) + getElement(b, j);
      CHECK(getElement(y, i * 7 + j) == doctest::Approx(want).epsilon(1e-4));
    }
  }
  auto ba = test::kernelFrom("def @main(%x: Tensor[(2, 3, 4), float32], %b: Tensor[(3,), float32]) { nn.bias_add(%x, %b) }");
  Tensor x3 = test::randomTensor(DType::Float32, {2, 3, 4}, rng), b3 = test::randomTensor(DType::Float32, {3}, rng);
  std::vector<Tensor> bin{x3, b3};
  Tensor z = (*ba)(bin)[0];
  for (int64_t i = 0; i < 24; ++i)
    CHECK(getElement(z, i) == doctest::Approx(getElement(x3, i) + getElement(b3, (i / 4) % 3)));
}

TEST_CASE("row softmax: every row width through the prefetching pass, float32 and float64") {
  std::mt19937 rng(31);
  for (DType dt : {DType::Float32, DType::Float64}) {
    std::string ty = "Tensor[(?, ?), " + std::string(dtypeName(dt)) + "]";
    std::string src = "def @main(%x: " + ty + ") { nn.softmax(%x, axis=-1) }";
    // The one-softmax kernel walks each row in chunks and prefetches the next row.
    CHECK(kernel_ir::lowerToLoops(test::fusedFrom(src)).toString().find("prefetching in0[") != std::string::npos);
    auto k = test::kernelFrom(src);
    for (int64_t rows : {0, 1, 5})
      for (int64_t cols : {1, 7, 127, 128, 129, 255, 256, 257, 1000, 4099}) {
        CAPTURE(ty);
        CAPTURE(rows);
        CAPTURE(cols);
        Tensor x = Tensor::empty(dt, {rows, cols});
        std::uniform_real_distribution<double> d(-30, 30);
        for (int64_t i = 0; i < x.numel(); ++i) test::setElement(x, i, d(rng));
        if (rows > 1 && cols > 2) test::setElement(x, cols + 2, -std::numeric_limits<double>::infinity());
        std::vector<Tensor> in{x};
        Tensor y = (*k)(in)[0];
        REQUIRE(y.shape() == x.shape());
        for (int64_t r = 0; r < rows; ++r) {
          double m = -std::numeric_limits<double>::infinity(), s = 0;
          for (int64_t c = 0; c < cols; ++c) m = std::max(m, getElement(x, r * cols + c));
          for (int64_t c = 0; c < cols; ++c) s += std::exp(getElement(x, r * cols + c) - m);
          for (int64_t c = 0; c < cols; ++c) {
            double want = std::exp(getElement(x, r * cols + c) - m) / s;
            CHECK(getElement(y, r * cols + c) == doctest::Approx(want).epsilon(1e-5).scale(1e-30));
          }
        }
      }
  }
}

TEST_CASE("row softmax: exp of x - max down to denormal and zero results, NaN and infinite rows") {
  std::string src = "def @main(%x: Tensor[(?, ?), float32]) { nn.softmax(%x, axis=-1) }";
  // x - max(x) is never above 0: the kernel takes exp's shorter form for it.
  CHECK(kernel_ir::lowerToLoops(test::fusedFrom(src)).toString().find("exp_nonpositive(") != std::string::npos);
  auto k = test::kernelFrom(src);
  std::mt19937 rng(41);
  const int64_t rows = 12, cols = 300;
  Tensor x = Tensor::empty(DType::Float32, {rows, cols});
  for (int64_t r = 0; r < rows; ++r) {
    // Rows spread over 1 to 201: exp(x - max) reaches the denormals (x - max
    // from -87 to -104) and 0 below.
    std::uniform_real_distribution<float> d(-1.0f, 0.0f);
    float spread = r < 9 ? static_cast<float>(r * 25 + 1) : 1.0f;
    for (int64_t c = 0; c < cols; ++c) x.data<float>()[r * cols + c] = d(rng) * spread;
  }
  x.data<float>()[9 * cols + 3] = std::numeric_limits<float>::quiet_NaN();  // row 9: all NaN
  x.data<float>()[10 * cols + 4] = std::numeric_limits<float>::infinity();  // row 10: inf - inf is NaN
  for (int64_t c = 0; c < cols; ++c) x.data<float>()[11 * cols + c] = -std::numeric_limits<float>::infinity();
  std::vector<Tensor> in{x};
  Tensor y = (*k)(in)[0];
  int denormals = 0, zeros = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    const float* row = x.data<float>() + r * cols;
    for (int64_t c = 0; c < cols; ++c) m = std::isnan(row[c]) || std::isnan(m) ? NAN : std::max(m, double(row[c]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(double(row[c]) - m);
    for (int64_t c = 0; c < cols; ++c) {
      CAPTURE(r);
      CAPTURE(c);
      double want = std::exp(double(row[c]) - m) / s;
      float got = y.data<float>()[r * cols + c];
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
        continue;
      }
      if (got == 0) ++zeros;
      if (got != 0 && std::fabs(got) < FLT_MIN) ++denormals;
      // x - max rounds to float (up to half an ulp of ~100: a relative 4e-6 in
      // exp), as the other softmax tests allow; denormals also lose their low bits.
      CHECK(std::fabs(got - want) <= 1e-5 * want + 2 * std::numeric_limits<float>::denorm_min());
    }
  }
  CHECK(denormals > 0);  // the sweep reached them
  CHECK(zeros > 0);
}

TEST_CASE("a kernel of row reductions counts the reduced elements as its work and goes wide") {
  int before = device::numThreads();
  device::setNumThreads(2);
  auto k = test::kernelFrom("def @main(%x: Tensor[(?, ?), float32]) { sum(%x, axis=[1]) }");
  std::mt19937 rng(5);
  // 64 rows of 4096: few rows, but 256K elements of work.
  Tensor big = Tensor::empty(DType::Float32, {64, 4096});
  for (int64_t i = 0; i < big.numel(); ++i) big.data<float>()[i] = static_cast<float>(i % 7);
  std::vector<Tensor> in{big};
  int64_t jobs = device::parallelJobsRun();
  Tensor y = (*k)(in)[0];
  CHECK(device::parallelJobsRun() == jobs + 1);
  for (int64_t r = 0; r < 64; ++r) {
    double want = 0;
    for (int64_t c = 0; c < 4096; ++c) want += (r * 4096 + c) % 7;
    CHECK(y.data<float>()[r] == doctest::Approx(want));
  }
  // A small one stays on the caller's thread.
  Tensor small = Tensor::empty(DType::Float32, {64, 8});
  for (int64_t i = 0; i < small.numel(); ++i) small.data<float>()[i] = 1;
  std::vector<Tensor> sin{small};
  jobs = device::parallelJobsRun();
  Tensor z = (*k)(sin)[0];
  CHECK(device::parallelJobsRun() == jobs);
  CHECK(z.data<float>()[63] == 8.f);
  device::setNumThreads(before);
}

TEST_CASE("a global mean over short rows is vectorized along the rows, not across them with gathers") {
  // A CNN's global average pool: 64 channels of 32x32. The 32-wide rows were
  // fully unrolled first and the loop over them vectorized with strided gathers;
  // then each 32-wide row ended in a horizontal sum of its own. The two trailing
  // axes are now one reduction over 1024 contiguous floats, indexed with no
  // division left.
  auto k = jit::KernelCache::global().get(
      test::fusedFrom("def @main(%x: Tensor[(1, 64, 32, 32), float32]) { mean(%x, axis=[2, 3]) }"), {}, true);
  const std::string& ir = k->optimizedIR();
  CHECK(ir.find("gather") == std::string::npos);
  // Whole vectors of the machine's width: 16 floats with AVX-512, 8 with AVX2.
  CHECK(ir.find(__builtin_cpu_supports("avx512f") ? "load <16 x float>" : "load <8 x float>") != std::string::npos);
  CHECK(ir.find("rem ") == std::string::npos);
  CHECK(ir.find("div ") == std::string::npos);
  Tensor x = Tensor::empty(DType::Float32, {1, 64, 32, 32});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7) % 13);
  std::vector<Tensor> in{x};
  Tensor y = (*k)(in)[0];
  for (int64_t c = 0; c < 64; ++c) {
    double want = 0;
    for (int64_t i = 0; i < 1024; ++i) want += static_cast<double>(((c * 1024 + i) * 7) % 13);
    CHECK(y.data<float>()[c] == doctest::Approx(want / 1024));
  }
}
