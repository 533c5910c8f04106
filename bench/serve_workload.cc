// The serving workload's program, requests and result comparison (serve_workload.h).
#include "bench/serve_workload.h"

#include <cmath>
#include <random>

#include "kiln/compile.h"
#include "kiln/tensor.h"

namespace kiln::bench {

namespace {

const char* kProgram = R"(#[version = "0.0.5"]
// Static shapes: a dense layer with bias and ReLU at batch 1.
def @dense(%x: Tensor[(1, 64), float32], %w: Tensor[(64, 64), float32], %b: Tensor[(64), float32])
    -> Tensor[(1, 64), float32] {
  nn.relu(nn.bias_add(nn.dense(%x, %w, units=64), %b))
}

// Dynamic batch: the same layer over ? rows (large enough to share out its loops).
def @batched(%x: Tensor[(?, 64), float32], %w: Tensor[(64, 64), float32], %b: Tensor[(64), float32])
    -> Tensor[(?, 64), float32] {
  nn.relu(nn.bias_add(nn.dense(%x, %w, units=64), %b))
}

// Dynamic shapes: any number of 16-wide rows, softmax-weighted row sums.
def @rows(%x: Tensor[(?, 16), float32]) -> Tensor[(?), float32] {
  sum(multiply(nn.softmax(multiply(%x, 2f), axis=1), %x), axis=[1])
}

// Recursion: a List of n scaled copies of %v, built by recursion and folded.
def @copies(%n: int32, %v: Tensor[(?), float32]) -> List[Tensor[(?), float32]] {
  if (%n == 0) { Nil } else { Cons(multiply(%v, cast(%n, dtype="float32")), @copies(%n - 1, %v)) }
}
def @recursive(%n: int32, %v: Tensor[(?), float32]) -> (Tensor[(?), float32], int32) {
  let %l = @copies(%n, %v);
  (@foldl(fn (%acc: Tensor[(?), float32], %x: Tensor[(?), float32]) { add(%acc, tanh(%x)) }, zeros_like(%v), %l),
   @length(%l))
}
)";

Tensor randomTensor(std::mt19937& rng, std::initializer_list<int64_t> shape, float scale) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

}  // namespace

ServeWorkload makeServeWorkload(int variants) {
  ServeWorkload w;
  w.exe = compile(kProgram, "serve_workload");
  std::mt19937 rng(20261124);
  Tensor weight = randomTensor(rng, {64, 64}, 0.2f), bias = randomTensor(rng, {64}, 0.1f);
  for (int k = 0; k < variants; ++k) {
    switch (k % 4) {
      case 0:
        w.requests.push_back({"dense", {Value(randomTensor(rng, {1, 64}, 1.0f)), Value(weight), Value(bias)}, "static"});
        break;
      case 1: {
        int64_t rows = 1 + (k * 7) % 37;
        w.requests.push_back({"rows", {Value(randomTensor(rng, {rows, 16}, 2.0f))}, "dynamic"});
        break;
      }
      case 3: {
        int64_t rows = 64 + (k * 29) % 960;
        w.requests.push_back({"batched", {Value(randomTensor(rng, {rows, 64}, 1.0f)), Value(weight), Value(bias)}, "batched"});
        break;
      }
      default: {
        int64_t length = 3 + (k * 5) % 20;
        Tensor v = Tensor::empty(DType::Float32, {length});
        std::uniform_real_distribution<float> u(-0.3f, 0.3f);
        for (int64_t i = 0; i < length; ++i) v.data<float>()[i] = u(rng);
        w.requests.push_back({"recursive", {Value::intScalar(DType::Int32, 1 + k % 12), Value(v)}, "recursive"});
      }
    }
  }
  return w;
}

bool sameValue(const Value& a, const Value& b, double rtol, std::string* why) {
  if (a.isTensor() != b.isTensor()) return *why = "a tensor against " + b.describe(), false;
  if (a.isTensor()) {
    Tensor x = a.tensor(), y = b.tensor();
    if (x.dtype() != y.dtype() || x.shape() != y.shape())
      return *why = "got " + a.describe() + ", expected " + b.describe(), false;
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t xi = 0, yi = 0;
      double xf = 0, yf = 0;
      size_t size = dtypeSize(x.dtype());
      readScalar(static_cast<const char*>(x.data()) + i * size, x.dtype(), xi, xf);
      readScalar(static_cast<const char*>(y.data()) + i * size, y.dtype(), yi, yf);
      bool same = isFloat(x.dtype()) ? std::abs(xf - yf) <= rtol * std::max(1.0, std::abs(yf)) : xi == yi;
      if (!same) return *why = "element " + std::to_string(i) + ": " + x.toString(8) + " against " + y.toString(8), false;
    }
    return true;
  }
  if (a.kind() != b.kind() || a.isTuple() != b.isTuple() || a.isAdt() != b.isAdt())
    return *why = "got " + a.describe() + ", expected " + b.describe(), false;
  if (!a.isTuple() && !a.isAdt()) return *why = "cannot compare " + a.describe(), false;
  if (a.ctor() != b.ctor() || a.fields().size() != b.fields().size())
    return *why = "got " + a.describe() + ", expected " + b.describe(), false;
  for (size_t i = 0; i < a.fields().size(); ++i)
    if (!sameValue(a.fields()[i], b.fields()[i], rtol, why)) return false;
  return true;
}

}  // namespace kiln::bench
