// Element-wise kernels against a plain reference implementation: every unary and
// binary operator, each applicable dtype, broadcasting, size-0 and size-1
// dimensions and dynamic dimensions; fused against unfused evaluation.
#include <functional>
#include <map>

#include <atomic>
#include <thread>

#include "device/thread_pool.h"
#include "kernel_ir/lower.h"
#include "kernel_ir/scalar_kernel.h"
#include "kernel_util.h"

using namespace kiln;
using test::getElement;

namespace {

// Reference semantics, in double, for one element. `dt` is the operand dtype.
double wrapInt(double v, DType dt) {
  auto i = static_cast<int64_t>(v);
  switch (dt) {
    case DType::Int8: return static_cast<int8_t>(i);
    case DType::Int16: return static_cast<int16_t>(i);
    case DType::Int32: return static_cast<int32_t>(i);
    case DType::UInt8: return static_cast<uint8_t>(i);
    case DType::UInt16: return static_cast<uint16_t>(i);
    default: return static_cast<double>(i);
  }
}

double refUnary(const std::string& op, double x, DType dt) {
  bool flt = isFloat(dt);
  if (op == "exp") return std::exp(x);
  if (op == "log") return std::log(x);
  if (op == "sqrt") return std::sqrt(x);
  if (op == "rsqrt") return 1 / std::sqrt(x);
  if (op == "tanh") return std::tanh(x);
  if (op == "sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "erf") return std::erf(x);
  if (op == "sin") return std::sin(x);
  if (op == "cos") return std::cos(x);
  if (op == "negative") return flt ? -x : wrapInt(-x, dt);
  if (op == "abs") return flt ? std::fabs(x) : wrapInt(std::fabs(x), dt);
  if (op == "nn.relu") return x > 0 ? x : 0;
  if (op == "floor") return std::floor(x);
  if (op == "ceil") return std::ceil(x);
  if (op == "round") return std::nearbyint(x);
  if (op == "logical_not") return x == 0;
  if (op == "copy") return x;
  FAIL("no reference for " << op);
  return 0;
}

double refBinary(const std::string& op, double a, double b, DType dt) {
  bool flt = isFloat(dt);
  bool uns = isUnsignedInt(dt);
  if (op == "add") return flt ? a + b : wrapInt(a + b, dt);
  if (op == "subtract") return flt ? a - b : wrapInt(a - b, dt);
  if (op == "multiply") return flt ? a * b : wrapInt(a * b, dt);
  if (op == "maximum") return std::max(a, b);
  if (op == "minimum") return std::min(a, b);
  if (op == "equal") return a == b;
  if (op == "not_equal") return a != b;
  if (op == "less") return a < b;
  if (op == "less_equal") return a <= b;
  if (op == "greater") return a > b;
  if (op == "greater_equal") return a >= b;
  if (op == "logical_and") return a != 0 && b != 0;
  if (op == "logical_or") return a != 0 || b != 0;
  if (op == "power") return flt ? std::pow(a, b) : wrapInt(std::pow(a, b), dt);
  if (flt) {
    if (op == "divide") return a / b;
    if (op == "floor_divide") return std::floor(a / b);
    if (op == "mod") return std::fmod(a, b);
    if (op == "floor_mod") {
      double r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
  }
  // Integers: C truncation for divide/mod, flooring variants round down; x / 0 and x % 0 are 0.
  auto x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
  if (y == 0) return 0;
  int64_t q = x / y, r = x % y;
  if (!uns && r != 0 && ((r < 0) != (y < 0))) {
    if (op == "floor_divide") return wrapInt(static_cast<double>(q - 1), dt);
    if (op == "floor_mod") return static_cast<double>(r + y);
  }
  if (op == "divide" || op == "floor_divide") return wrapInt(static_cast<double>(q), dt);
  if (op == "mod" || op == "floor_mod") return static_cast<double>(r);
  FAIL("no reference for " << op);
  return 0;
}

std::string relayType(DType dt, const std::string& dims) {
  return "Tensor[(" + dims + "), " + std::string(dtypeName(dt)) + "]";
}

// Row-major index of `out` multi-index into a broadcast operand of shape `in`.
int64_t broadcastOffset(const Shape& out, const Shape& in, int64_t flat) {
  int64_t off = 0, stride = 1;
  for (size_t d = out.size(); d-- > 0;) {
    int64_t i = flat % out[d];
    flat /= out[d];
    size_t k = d - (out.size() - in.size());
    if (d >= out.size() - in.size()) {
      if (in[k] != 1) off += i * stride;
      stride *= in[k];
    }
  }
  return off;
}

const std::vector<DType> kFloats = {DType::Float16, DType::Float32, DType::Float64};
const std::vector<DType> kNumeric = {DType::Float16, DType::Float32, DType::Float64, DType::Int8,
                                     DType::Int16,   DType::Int32,   DType::Int64,   DType::UInt8,
                                     DType::UInt16};

}  // namespace

TEST_CASE("unary element-wise kernels match the reference for every dtype") {
  std::mt19937 rng(7);
  struct Case {
    const char* op;
    std::vector<DType> dtypes;
    double lo, hi;
  };
  const Case cases[] = {
      {"exp", kFloats, -8, 8},          {"log", kFloats, 0.01, 50},        {"sqrt", kFloats, 0, 50},
      {"rsqrt", kFloats, 0.01, 50},     {"tanh", kFloats, -6, 6},          {"sigmoid", kFloats, -12, 12},
      {"erf", kFloats, -4, 4},          {"sin", kFloats, -10, 10},         {"cos", kFloats, -10, 10},
      {"negative", kNumeric, -5, 5},    {"abs", kNumeric, -5, 5},          {"nn.relu", kNumeric, -5, 5},
      {"floor", kNumeric, -5, 5},       {"ceil", kNumeric, -5, 5},         {"round", kNumeric, -5, 5},
      {"logical_not", {DType::Bool}, 0, 1},
      {"copy", {DType::Float32, DType::Int64, DType::Bool, DType::UInt8}, -5, 5},
  };
  for (const Case& c : cases) {
    for (DType dt : c.dtypes) {
      CAPTURE(c.op);
      CAPTURE(dtypeName(dt));
      auto k = test::kernelFrom("def @main(%x: " + relayType(dt, "?, 7") + ") { " + c.op + "(%x) }");
      for (int64_t rows : {5, 1, 0}) {
        Tensor x = test::randomTensor(dt, {rows, 7}, rng, c.lo, c.hi);
        std::vector<Tensor> in{x};
        Tensor y = (*k)(in)[0];
        REQUIRE(y.numel() == rows * 7);
        DType outType = std::string(c.op) == "logical_not" ? DType::Bool : dt;
        for (int64_t i = 0; i < y.numel(); ++i) {
          double want = refUnary(c.op, getElement(x, i), dt);
          // The reference value rounded to the result type, as the kernel stores it.
          Tensor tmp = Tensor::empty(outType, {1});
          test::setElement(tmp, 0, want);
          double wantStored = isFloat(outType) ? want : getElement(tmp, 0);
          CAPTURE(getElement(x, i));
          CHECK(test::closeTo(getElement(y, i), wantStored, outType));
        }
      }
    }
  }
}

TEST_CASE("binary element-wise kernels broadcast and match the reference") {
  std::mt19937 rng(11);
  const char* arith[] = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "floor_divide", "mod",
                         "floor_mod"};
  const char* compare[] = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"};
  struct Op {
    std::string name;
    std::vector<DType> dtypes;
  };
  std::vector<Op> ops;
  for (const char* a : arith) ops.push_back({a, kNumeric});
  for (const char* c : compare) ops.push_back({c, {DType::Float32, DType::Int32, DType::UInt8, DType::UInt16, DType::Int64}});
  ops.push_back({"logical_and", {DType::Bool}});
  ops.push_back({"logical_or", {DType::Bool}});
  ops.push_back({"power", {DType::Float32, DType::Float64}});
  // (a's type, b's type, run-time shapes of a and b)
  struct Shapes {
    std::string ta, tb;
    std::initializer_list<int64_t> a, b;
  };
  const Shapes shapes[] = {
      {"?, 1, 5", "4, 1", {3, 1, 5}, {4, 1}},  // both sides broadcast
      {"?, 6", "?, 6", {2, 6}, {2, 6}},        // same dynamic shape
      {"?, 6", "?, 6", {2, 6}, {1, 6}},        // a `?` dimension that broadcasts at run time
      {"?", "", {0}, {}},                      // size 0 against a scalar
      {"1", "3", {1}, {3}},                    // size 1
  };
  for (const Op& op : ops) {
    for (DType dt : op.dtypes) {
      for (const Shapes& s : shapes) {
        CAPTURE(op.name);
        CAPTURE(dtypeName(dt));
        CAPTURE(s.ta);
        auto k = test::kernelFrom("def @main(%a: " + relayType(dt, s.ta) + ", %b: " + relayType(dt, s.tb) + ") { " +
                                  op.name + "(%a, %b) }");
        Tensor a = test::randomTensor(dt, s.a, rng), b = test::randomTensor(dt, s.b, rng);
        if (op.name == "power") b = test::randomTensor(dt, s.b, rng, -2, 2), a = test::randomTensor(dt, s.a, rng, 0.1, 3);
        std::vector<Tensor> in{a, b};
        Tensor y = (*k)(in)[0];
        for (int64_t i = 0; i < y.numel(); ++i) {
          double av = getElement(a, broadcastOffset(y.shape(), a.shape(), i));
          double bv = getElement(b, broadcastOffset(y.shape(), b.shape(), i));
          double want = refBinary(op.name, av, bv, dt);
          if (isFloat(dt) && y.dtype() == dt) {
            // Compare against the operation done in the kernel's own precision.
            if (dt == DType::Float16) want = halfToFloat(floatToHalf(static_cast<float>(want)));
          }
          CAPTURE(av);
          CAPTURE(bv);
          CHECK(test::closeTo(getElement(y, i), want, y.dtype()));
        }
      }
    }
  }
}

TEST_CASE("where, clip and cast kernels") {
  std::mt19937 rng(3);
  auto k = test::kernelFrom(
      "def @main(%c: Tensor[(?, 1), bool], %x: Tensor[(?, 4), float32], %y: float32) { where(%c, %x, %y) }");
  Tensor c = test::randomTensor(DType::Bool, {3, 1}, rng), x = test::randomTensor(DType::Float32, {3, 4}, rng);
  Tensor y = test::randomTensor(DType::Float32, {}, rng);
  std::vector<Tensor> in{c, x, y};
  Tensor r = (*k)(in)[0];
  for (int64_t i = 0; i < 12; ++i)
    CHECK(getElement(r, i) == (getElement(c, i / 4) != 0 ? getElement(x, i) : getElement(y, 0)));

  auto clip = test::kernelFrom("def @main(%x: Tensor[(?,), int32]) { clip(%x, a_min=-2.5f, a_max=6f) }");
  Tensor xi = test::randomTensor(DType::Int32, {50}, rng);
  std::vector<Tensor> ci{xi};
  Tensor cr = (*clip)(ci)[0];
  for (int64_t i = 0; i < 50; ++i) CHECK(getElement(cr, i) == std::min(6.0, std::max(-2.0, getElement(xi, i))));

  // Casts between every pair of a few dtypes, including saturating float -> int.
  const DType types[] = {DType::Float32, DType::Float16, DType::Int8, DType::Int64, DType::UInt8, DType::UInt16, DType::Bool};
  for (DType from : types) {
    for (DType to : types) {
      CAPTURE(dtypeName(from));
      CAPTURE(dtypeName(to));
      auto ck = test::kernelFrom("def @main(%x: " + relayType(from, "?") + ") { cast(%x, dtype=\"" +
                                 std::string(dtypeName(to)) + "\") }");
      Tensor src = test::randomTensor(from, {40}, rng, -300, 300);
      std::vector<Tensor> si{src};
      Tensor out = (*ck)(si)[0];
      for (int64_t i = 0; i < 40; ++i) {
        double v = getElement(src, i), want;
        if (isBool(to)) want = v != 0;
        else if (isFloat(to)) want = to == DType::Float16 ? halfToFloat(floatToHalf(static_cast<float>(v))) : v;
        else {
          double lo = to == DType::Int8 ? -128 : isUnsignedInt(to) ? 0 : -9.2e18;
          double hi = to == DType::Int8 ? 127 : to == DType::UInt8 ? 255 : to == DType::UInt16 ? 65535 : 9.2e18;
          want = std::trunc(std::min(hi, std::max(lo, v)));
          if (!isFloat(from)) want = wrapInt(v, to);
        }
        CAPTURE(v);
        CHECK(test::closeTo(getElement(out, i), want, to));
      }
    }
  }
}

TEST_CASE("a fused chain equals the same operators run one kernel at a time") {
  std::mt19937 rng(5);
  const std::string params = "(%x: Tensor[(?, 8), float32], %b: Tensor[(8,), float32])";
  auto fused = test::kernelFrom("def @main" + params +
                                " { let %t = tanh(%x * 0.5f + %b); sigmoid(%t) * exp(-%t) - nn.relu(%x) }");
  Tensor x = test::randomTensor(DType::Float32, {13, 8}, rng), b = test::randomTensor(DType::Float32, {8}, rng);
  std::vector<Tensor> in{x, b};
  Tensor f = (*fused)(in)[0];

  auto one = [&](const std::string& body, std::vector<Tensor> args) {
    std::string sig = "def @main(";
    for (size_t i = 0; i < args.size(); ++i) {
      std::string dims;
      for (size_t d = 0; d < args[i].rank(); ++d) dims += (d ? ", " : "") + std::to_string(args[i].shape()[d]);
      if (args[i].rank() == 1) dims += ",";
      sig += (i ? ", %a" : "%a") + std::to_string(i) + ": Tensor[(" + dims + "), float32]";
    }
    return (*test::kernelFrom(sig + ") { " + body + " }"))(args)[0];
  };
  Tensor half = Tensor::empty(DType::Float32, std::initializer_list<int64_t>{});
  Tensor m = one("multiply(%a0, 0.5f)", {x});
  Tensor t = one("tanh(add(%a0, %a1))", {m, b});
  Tensor s = one("sigmoid(%a0)", {t});
  Tensor e = one("exp(negative(%a0))", {t});
  Tensor se = one("multiply(%a0, %a1)", {s, e});
  Tensor r = one("nn.relu(%a0)", {x});
  Tensor u = one("subtract(%a0, %a1)", {se, r});
  for (int64_t i = 0; i < u.numel(); ++i) CHECK(getElement(f, i) == doctest::Approx(getElement(u, i)).epsilon(1e-6));
  (void)half;
}

TEST_CASE("a kernel with several outputs writes each in one pass") {
  std::mt19937 rng(9);
  auto k = test::kernelFrom("def @main(%x: Tensor[(?, 6), float32]) { let %y = %x * 2f; (%y + 1f, %y < 0f, %y) }");
  Tensor x = test::randomTensor(DType::Float32, {4, 6}, rng);
  std::vector<Tensor> in{x};
  auto outs = (*k)(in);
  REQUIRE(outs.size() == 3);
  CHECK(outs[1].dtype() == DType::Bool);
  for (int64_t i = 0; i < 24; ++i) {
    double v = getElement(x, i) * 2;
    CHECK(getElement(outs[0], i) == doctest::Approx(v + 1));
    CHECK(getElement(outs[1], i) == (v < 0));
    CHECK(getElement(outs[2], i) == doctest::Approx(v));
  }
}

TEST_CASE("outputs over one iteration space share one loop nest - others get their own") {
  // An LSTM gate's split into four parts: one parallel loop storing all four.
  std::mt19937 rng(11);
  const char* gates =
      "def @main(%g: Tensor[(3, 64), float32], %b: Tensor[(64,), float32]) {"
      "  let %s = split(%g + %b, indices_or_sections=4, axis=1); (%s.0, sigmoid(%s.1), tanh(%s.2), %s.3 * 2f) }";
  loop::LoopKernel loops = kernel_ir::lowerToLoops(test::fusedFrom(gates));
  REQUIRE(loops.body >= 0);
  size_t topLoops = 0;
  for (loop::StmtId id : loops.stmt(loops.body).body) topLoops += loops.stmt(id).kind == loop::StmtKind::For;
  CHECK(topLoops == 1);
  auto k = test::kernelFrom(gates);
  Tensor g = test::randomTensor(DType::Float32, {3, 64}, rng), b = test::randomTensor(DType::Float32, {64}, rng);
  std::vector<Tensor> in{g, b};
  auto outs = (*k)(in);
  REQUIRE(outs.size() == 4);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 16; ++c) {
      auto at = [&](int part) { return getElement(g, r * 64 + part * 16 + c) + getElement(b, part * 16 + c); };
      CHECK(getElement(outs[0], r * 16 + c) == doctest::Approx(at(0)));
      CHECK(getElement(outs[1], r * 16 + c) == doctest::Approx(1 / (1 + std::exp(-at(1)))).epsilon(1e-5));
      CHECK(getElement(outs[2], r * 16 + c) == doctest::Approx(std::tanh(at(2))).epsilon(1e-5));
      CHECK(getElement(outs[3], r * 16 + c) == doctest::Approx(at(3) * 2));
    }
  // Different shapes: two nests.
  loop::LoopKernel two = kernel_ir::lowerToLoops(
      test::fusedFrom("def @main(%x: Tensor[(4, 8), float32]) { (%x * 2f, sum(%x, axis=[1])) }"));
  size_t twoLoops = 0;
  for (loop::StmtId id : two.stmt(two.body).body) twoLoops += two.stmt(id).kind == loop::StmtKind::For;
  CHECK(twoLoops == 2);
}

TEST_CASE("a loop whose work is known to be small is inline with no remainder, and others go to the pool") {
  // Static and below the pool's threshold: no task function, and a trip count of
  // 256 needs no scalar remainder after the vector loop (16 lanes with AVX-512,
  // 8 with AVX2).
  auto small = jit::KernelCache::global().get(
      test::fusedFrom("def @main(%x: Tensor[(1, 256), float32]) { sigmoid(%x) * tanh(%x) }"), {}, true);
  const std::string& ir = small->optimizedIR();
  CHECK(ir.find("kiln_parallel_for") == std::string::npos);
  const char* lanes = __builtin_cpu_supports("avx512f") ? "<16 x float>" : "<8 x float>";
  CHECK(ir.find(lanes) != std::string::npos);
  auto count = [](const std::string& text, const char* what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  auto dyn = jit::KernelCache::global().get(
      test::fusedFrom("def @main(%x: Tensor[(?), float32]) { sigmoid(%x) * tanh(%x) }"), {}, true);
  const std::string& dynIR = dyn->optimizedIR();
  CHECK(dynIR.find("kiln_parallel_for") != std::string::npos);
  // No vectorized epilogue (a narrower copy of the math) after the vector loop.
  CHECK(dynIR.find("vec.epilog") == std::string::npos);
  // The math's comparisons: once (the vector loop) in the static kernel; twice
  // (the vector loop and the scalar remainder) in the dynamic one.
  CHECK(count(dynIR, "fcmp") == 2 * count(ir, "fcmp"));
  std::mt19937 rng(12);
  Tensor x = test::randomTensor(DType::Float32, {1, 256}, rng);
  std::vector<Tensor> in{x};
  Tensor y = (*small)(in)[0];
  for (int64_t i = 0; i < 256; ++i) {
    double v = getElement(x, i);
    CHECK(getElement(y, i) == doctest::Approx(std::tanh(v) / (1 + std::exp(-v))).epsilon(1e-5));
  }
}

TEST_CASE("large kernels run on the thread pool and agree with one thread, also from many threads at once") {
  std::mt19937 rng(17);
  auto k = test::kernelFrom("def @main(%x: Tensor[(?, 1000), float32], %b: Tensor[(1000,), float32]) {"
                            " (tanh(%x + %b) * 3f, sum(%x * %x, axis=[1])) }");
  Tensor x = test::randomTensor(DType::Float32, {300, 1000}, rng), b = test::randomTensor(DType::Float32, {1000}, rng);
  std::vector<Tensor> in{x, b};
  device::setNumThreads(1);
  auto serial = (*k)(in);
  device::setNumThreads(4);
  auto parallel = (*k)(in);
  for (size_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < serial[o].numel(); ++i) CHECK(getElement(parallel[o], i) == getElement(serial[o], i));
  // Kernels called from several threads at once: each result is right.
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 5; ++r) {
        auto out = (*k)(in);
        for (int64_t i = 0; i < out[1].numel(); ++i)
          if (getElement(out[1], i) != getElement(serial[1], i)) ++mismatches;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(mismatches == 0);
  device::setNumThreads(std::max(1u, std::thread::hardware_concurrency()));
}

TEST_CASE("many threads asking for the same new kernel at once compile it once") {
  auto f = test::fusedFrom("def @main(%x: Tensor[(?, 3), float32]) { %x * 41f - 1f }");
  auto& cache = jit::KernelCache::global();
  size_t before = cache.compiles();
  std::vector<std::shared_ptr<const jit::CompiledKernel>> got(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = cache.get(f); });
  for (auto& t : threads) t.join();
  CHECK(cache.compiles() == before + 1);
  for (const auto& k : got) CHECK(k.get() == got[0].get());
  // A different kernel is a different entry; the same one again is a hit.
  size_t hits = cache.hits();
  CHECK(cache.get(f).get() == got[0].get());
  CHECK(cache.hits() == hits + 1);
}

TEST_CASE("a kernel with ? dimensions: shapes remembered per input shapes, interleaved kernels, bad inputs still refused") {
  // Two kernels whose memo entries may share a slot, called alternately with
  // alternating shapes: each call's outputs take that call's shapes.
  auto rows = test::kernelFrom("def @main(%x: Tensor[(?, 3), float32]) { sum(%x * 2f, axis=[1]) }");
  auto cols = test::kernelFrom("def @main(%x: Tensor[(2, ?), float32]) { %x + 1f }");
  for (int round = 0; round < 3; ++round)
    for (int64_t n : {1, 4, 4, 7, 1}) {
      Tensor x = Tensor::empty(DType::Float32, {n, 3});
      for (int64_t i = 0; i < n * 3; ++i) x.data<float>()[i] = static_cast<float>(i);
      std::vector<Tensor> out = (*rows)(std::vector<Tensor>{x});
      REQUIRE(out[0].shape() == Shape{n});
      for (int64_t i = 0; i < n; ++i) CHECK(out[0].data<float>()[i] == doctest::Approx(2.0 * (9 * i + 3)));
      Tensor y = Tensor::empty(DType::Float32, {2, n + 1});
      for (int64_t i = 0; i < 2 * (n + 1); ++i) y.data<float>()[i] = static_cast<float>(i);
      std::vector<Tensor> out2 = (*cols)(std::vector<Tensor>{y});
      REQUIRE(out2[0].shape() == Shape{2, n + 1});
      CHECK(out2[0].data<float>()[2 * (n + 1) - 1] == static_cast<float>(2 * (n + 1)));
    }
  // The same shapes with another dtype are checked again, not answered from the memo.
  Tensor wrong = Tensor::empty(DType::Int32, {4, 3});
  CHECK_THROWS_AS((*rows)(std::vector<Tensor>{wrong}), kiln::Error);
  // ...and a wrong rank or a wrong static dimension too.
  CHECK_THROWS_AS((*rows)(std::vector<Tensor>{Tensor::empty(DType::Float32, {4, 5})}), kiln::Error);
  // The memo is per thread: another thread computes its own shapes.
  std::thread other([&] {
    std::vector<Tensor> out = (*rows)(std::vector<Tensor>{Tensor::empty(DType::Float32, {5, 3})});
    CHECK(out[0].shape() == Shape{5});
  });
  other.join();
}

TEST_CASE("a loop around loops is not unrolled: one copy of the vector body per kernel") {
  // Runtime-unrolling the row loop of a (?, 64) kernel made eight copies of its
  // inner vector loop (plus a remainder copy): slower to compile, no faster to run.
  auto k = jit::KernelCache::global().get(
      test::fusedFrom("def @main(%x: Tensor[(?, 64), float32], %b: Tensor[(64,), float32]) { %x * 3f + %b }"), {}, true);
  const std::string& ir = k->optimizedIR();
  size_t bodies = 0;
  for (size_t at = ir.find("\nvector.body"); at != std::string::npos; at = ir.find("\nvector.body", at + 1)) ++bodies;
  CHECK(bodies == 1);
  Tensor x = Tensor::empty(DType::Float32, {3, 64}), b = Tensor::empty(DType::Float32, {64});
  for (int64_t i = 0; i < 192; ++i) x.data<float>()[i] = static_cast<float>(i);
  for (int64_t i = 0; i < 64; ++i) b.data<float>()[i] = 0.5f;
  std::vector<Tensor> in{x, b};
  Tensor y = (*k)(in)[0];
  for (int64_t i = 0; i < 192; ++i) CHECK(y.data<float>()[i] == static_cast<float>(i) * 3 + 0.5f);
}

namespace {
// A task that counts each index it is given (buffers[0]: std::atomic<int>[n]).
void countIndices(void* const* buffers, const int64_t*, int64_t begin, int64_t end) {
  auto* seen = static_cast<std::atomic<int>*>(buffers[0]);
  for (int64_t i = begin; i < end; ++i) seen[i].fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

TEST_CASE("thread pool: every index exactly once, jobs back to back and from several callers at once") {
  int before = device::numThreads();
  device::setNumThreads(3);
  // Extents below, at and above the pieces a job is cut into (four per thread).
  for (int64_t n : {1, 2, 11, 12, 13, 1000}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    void* buffers[1] = {seen.data()};
    for (int rep = 0; rep < 200; ++rep) device::parallelFor(n, int64_t(1) << 20, countIndices, buffers, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(seen[static_cast<size_t>(i)].load() == 200);
  }
  // Callers racing for the pool: the losers run their jobs inline, none is lost.
  std::vector<std::atomic<int>> shared(4096);
  void* buffers[1] = {shared.data()};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 100; ++rep) device::parallelFor(4096, int64_t(1) << 20, countIndices, buffers, nullptr);
    });
  for (auto& c : callers) c.join();
  for (auto& v : shared) REQUIRE(v.load() == 400);
  device::setNumThreads(before);
}

// Integer power is exact and saturates to the type's range, the same in a JIT
// kernel and in the VM's host evaluation of scalar kernels. (The GPU computed it
// through libdevice's double pow, which gave pow(3, 1) = 2 on an H200.)
TEST_CASE("integer power is exact and saturates, in kernels and in host scalar evaluation") {
  struct Case {
    int64_t x, y, want;
  };
  constexpr int64_t i32max = std::numeric_limits<int32_t>::max(), i32min = std::numeric_limits<int32_t>::min();
  constexpr int64_t i64max = std::numeric_limits<int64_t>::max(), i64min = std::numeric_limits<int64_t>::min();
  const std::map<DType, std::vector<Case>> cases = {
      {DType::Int32,
       {{3, 1, 3},          {3, 19, 1162261467}, {3, 20, i32max},   {-3, 20, i32max},  {-3, 21, i32min},
        {-2, 31, i32min},   {2, 31, i32max},     {2, 30, 1 << 30},  {0, 0, 1},         {0, 5, 0},
        {0, -1, i32max},    {-1, -3, -1},        {-1, -4, 1},       {1, -7, 1},        {2, -1, 0},
        {-2, -1, 0},        {-7, 3, -343},       {-1, 1000001, -1}, {-1, 1000000, 1},  {2, 1000, i32max},
        {-2, 1001, i32min}, {5, 0, 1},           {46341, 2, i32max}, {46340, 2, 2147395600}}},
      // 3^39 is not a double: a double power rounds it to ...256.
      {DType::Int64,
       {{3, 39, 4052555153018976267},  {-3, 39, -4052555153018976267}, {3, 40, i64max}, {-2, 63, i64min},
        {2, 63, i64max},                {10, 18, 1000000000000000000},  {-1, int64_t{1} << 62, 1},
        {7, int64_t{1} << 40, i64max},  {0, -5, i64max}}},
      {DType::Int8, {{-2, 7, -128}, {2, 7, 127}, {3, 4, 81}, {3, 5, 127}, {-3, 5, -128}, {-1, 127, -1}, {2, 127, 127}}},
      {DType::UInt8, {{3, 5, 243}, {3, 6, 255}, {2, 7, 128}, {2, 8, 255}, {0, 0, 1}, {255, 1, 255}, {1, 255, 1}}},
  };
  for (const auto& [dt, list] : cases) {
    CAPTURE(dtypeName(dt));
    const auto n = static_cast<int64_t>(list.size());
    Tensor x = Tensor::empty(dt, {n}), y = Tensor::empty(dt, {n});
    auto put = [&](const Tensor& t, int64_t i, int64_t v) {
      if (dt == DType::Int64) t.data<int64_t>()[i] = v;
      else test::setElement(t, i, static_cast<double>(v));
    };
    auto read = [&](const Tensor& t, int64_t i) {
      return dt == DType::Int64 ? t.data<int64_t>()[i] : static_cast<int64_t>(getElement(t, i));
    };
    for (int64_t i = 0; i < n; ++i) put(x, i, list[i].x), put(y, i, list[i].y);
    std::string type = relayType(dt, std::to_string(n));
    auto k = test::kernelFrom("def @main(%x: " + type + ", %y: " + type + ") { power(%x, %y) }");
    std::vector<Tensor> in{x, y};
    Tensor got = (*k)(in)[0];

    std::string scalar = "Tensor[(), " + std::string(dtypeName(dt)) + "]";
    auto host = kernel_ir::ScalarKernel::tryBuild(
        test::fusedFrom("def @main(%x: " + scalar + ", %y: " + scalar + ") { power(%x, %y) }"));
    REQUIRE(host);
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(list[i].x);
      CAPTURE(list[i].y);
      CHECK(read(got, i) == list[i].want);
      Value args[2] = {Value::intScalar(dt, list[i].x), Value::intScalar(dt, list[i].y)};
      const Value* inputs[2] = {&args[0], &args[1]};
      Value result;
      Value* outputs[1] = {&result};
      host->run(inputs, outputs);
      CHECK(result.intValue() == list[i].want);
    }
  }
}
