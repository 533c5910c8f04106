// Helpers for kernel tests: build a kernel from Relay text, make random tensors,
// read and write elements of any dtype as double, and compare with tolerances.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/kernel.h"
#include "kiln/half.h"
#include "test_util.h"

namespace kiln::test {

// @main of `src`, type-checked and converted to a fused function.
inline kernel_ir::FusedFunction fusedFrom(const std::string& src, const std::string& name = "k") {
  auto m = check(src);
  return compiler::toFusedFunction(m->findFunction("main")->fn, name);
}

inline std::shared_ptr<const jit::CompiledKernel> kernelFrom(const std::string& src) {
  return jit::KernelCache::global().get(fusedFrom(src));
}

inline double getElement(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float16: return halfToFloat(t.data<uint16_t>()[i]);
    case DType::Float32: return t.data<float>()[i];
    case DType::Float64: return t.data<double>()[i];
    case DType::Int8: return t.data<int8_t>()[i];
    case DType::Int16: return t.data<int16_t>()[i];
    case DType::Int32: return t.data<int32_t>()[i];
    case DType::Int64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::UInt8: return t.data<uint8_t>()[i];
    case DType::UInt16: return t.data<uint16_t>()[i];
    case DType::Bool: return t.data<uint8_t>()[i] ? 1 : 0;
  }
  return 0;
}

// Stores `v` converted to the tensor's dtype (integers wrap, as the kernels' integer arithmetic does).
inline void setElement(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::Float16: t.data<uint16_t>()[i] = floatToHalf(static_cast<float>(v)); break;
    case DType::Float32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::Float64: t.data<double>()[i] = v; break;
    case DType::Int8: t.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case DType::Int16: t.data<int16_t>()[i] = static_cast<int16_t>(static_cast<int64_t>(v)); break;
    case DType::Int32: t.data<int32_t>()[i] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case DType::Int64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
    case DType::UInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case DType::UInt16: t.data<uint16_t>()[i] = static_cast<uint16_t>(static_cast<int64_t>(v)); break;
    case DType::Bool: t.data<uint8_t>()[i] = v != 0; break;
  }
}

// Random values suited to the dtype: floats in [lo, hi], integers in a small range
// that includes 0 and negatives, bools half and half.
inline Tensor randomTensor(DType dt, std::span<const int64_t> shape, std::mt19937& rng, double lo = -3, double hi = 3) {
  Tensor t = Tensor::empty(dt, shape);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int> small(isUnsignedInt(dt) ? 0 : -20, 20);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = isFloat(dt) ? real(rng) : isBool(dt) ? static_cast<double>(rng() & 1) : static_cast<double>(small(rng));
    setElement(t, i, v);
  }
  return t;
}
inline Tensor randomTensor(DType dt, std::initializer_list<int64_t> shape, std::mt19937& rng, double lo = -3,
                           double hi = 3) {
  return randomTensor(dt, std::span<const int64_t>(shape.begin(), shape.size()), rng, lo, hi);
}

inline double tolerance(DType dt) {
  switch (dt) {
    case DType::Float16: return 2e-3;
    case DType::Float32: return 2e-6;
    case DType::Float64: return 1e-12;
    default: return 0;
  }
}

// Equal within the dtype's relative tolerance (NaN equals NaN; infinities exactly).
inline bool closeTo(double got, double want, DType dt) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  double tol = tolerance(dt);
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

}  // namespace kiln::test
