// Tensor storage, devices and printing.
#include "kiln/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <vector>
#include <new>


#include "kiln/error.h"
#include "kiln/half.h"

namespace kiln {

std::string Device::toString() const {
  std::string s = kind == Kind::CPU ? "cpu" : kind == Kind::CUDA ? "cuda" : "cuda-emu";
  if (index != 0) s += ":" + std::to_string(index);
  return s;
}

Device Device::parse(const std::string& name) {
  Device d;
  std::string kind = name.substr(0, name.find(':'));
  if (kind == "cpu") d.kind = Kind::CPU;
  else if (kind == "cuda") d.kind = Kind::CUDA;
  else if (kind == "cuda-emu") d.kind = Kind::CudaEmu;
  else throw Error("unknown device '" + name + "' (expected cpu, cuda, cuda-emu, cpu:N, cuda:N or cuda-emu:N)");
  if (kind.size() < name.size()) {
    std::string idx = name.substr(kind.size() + 1);
    if (idx.empty() || idx.size() > 3 || idx.find_first_not_of("0123456789") != std::string::npos)
      throw Error("bad device index in '" + name + "'");
    d.index = static_cast<uint16_t>(std::stoi(idx));
  }
  return d;
}

int64_t numElements(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeString(std::span<const int64_t> shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

Tensor Tensor::view(DType dtype, std::span<const int64_t> shape, std::shared_ptr<void> owner, Device device) {
  for (int64_t d : shape)
    if (d < 0) throw Error("negative dimension in shape " + shapeString(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.device_ = device;
  t.buffer_ = std::move(owner);
  return t;
}

void writeScalar(void* p, DType dtype, int64_t i, double f) {
  switch (dtype) {
    case DType::Float16: *static_cast<uint16_t*>(p) = floatToHalf(static_cast<float>(f)); break;
    case DType::Float32: *static_cast<float*>(p) = static_cast<float>(f); break;
    case DType::Float64: *static_cast<double*>(p) = f; break;
    case DType::Int8: *static_cast<int8_t*>(p) = static_cast<int8_t>(i); break;
    case DType::Int16: *static_cast<int16_t*>(p) = static_cast<int16_t>(i); break;
    case DType::Int32: *static_cast<int32_t*>(p) = static_cast<int32_t>(i); break;
    case DType::Int64: *static_cast<int64_t*>(p) = i; break;
    case DType::UInt8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(i); break;
    case DType::UInt16: *static_cast<uint16_t*>(p) = static_cast<uint16_t>(i); break;
    case DType::Bool: *static_cast<uint8_t*>(p) = i != 0; break;
  }
}

void readScalar(const void* p, DType dtype, int64_t& i, double& f) {
  switch (dtype) {
    case DType::Float16: f = halfToFloat(*static_cast<const uint16_t*>(p)); break;
    case DType::Float32: f = *static_cast<const float*>(p); break;
    case DType::Float64: f = *static_cast<const double*>(p); break;
    case DType::Int8: i = *static_cast<const int8_t*>(p); break;
    case DType::Int16: i = *static_cast<const int16_t*>(p); break;
    case DType::Int32: i = *static_cast<const int32_t*>(p); break;
    case DType::Int64: i = *static_cast<const int64_t*>(p); break;
    case DType::UInt8: i = *static_cast<const uint8_t*>(p); break;
    case DType::UInt16: i = *static_cast<const uint16_t*>(p); break;
    case DType::Bool: i = *static_cast<const uint8_t*>(p) != 0; break;
  }
}

namespace {
// The element count of a shape from outside, or -1 when a dimension is negative
// or the product overflows.
int64_t checkedElements(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}
}  // namespace

void Tensor::reuseAs(DType dtype, std::span<const int64_t> shape) {
  // A loop's output recycled for its next step has the same type: nothing to check.
  if (dtype == dtype_ && std::equal(shape.begin(), shape.end(), shape_.begin(), shape_.end())) return;
  int64_t n = checkedElements(shape);
  uint64_t bytes = 0;
  if (n < 0 || __builtin_mul_overflow(static_cast<uint64_t>(n), dtypeSize(dtype), &bytes) || bytes > nbytes())
    throw Error("cannot reuse a " + std::to_string(nbytes()) + "-byte tensor for shape " + shapeString(shape));
  dtype_ = dtype;
  shape_.assign(shape.begin(), shape.end());
}

Tensor Tensor::reshaped(std::span<const int64_t> shape) const {
  if (checkedElements(shape) != numel())
    throw Error("cannot view a tensor of shape " + shapeString(shape_) + " as " + shapeString(shape));
  Tensor t = *this;
  t.shape_.assign(shape.begin(), shape.end());
  return t;
}

namespace {
std::string element(const Tensor& t, int64_t i) {
  char buf[64];
  switch (t.dtype()) {
    case DType::Float32: std::snprintf(buf, sizeof buf, "%g", static_cast<double>(t.data<float>()[i])); break;
    case DType::Float64: std::snprintf(buf, sizeof buf, "%g", t.data<double>()[i]); break;
    case DType::Float16:
      std::snprintf(buf, sizeof buf, "%g", static_cast<double>(halfToFloat(t.data<uint16_t>()[i])));
      break;
    case DType::Int8: return std::to_string(t.data<int8_t>()[i]);
    case DType::Int16: return std::to_string(t.data<int16_t>()[i]);
    case DType::Int32: return std::to_string(t.data<int32_t>()[i]);
    case DType::Int64: return std::to_string(t.data<int64_t>()[i]);
    case DType::UInt8: return std::to_string(t.data<uint8_t>()[i]);
    case DType::UInt16: return std::to_string(t.data<uint16_t>()[i]);
    case DType::Bool: return t.data<uint8_t>()[i] ? "1" : "0";
  }
  return buf;
}
}  // namespace

namespace {
// One bracketed level of a row-major tensor; stops (closing every bracket) once
// `budget` elements have been printed.
void printLevel(const Tensor& t, size_t d, int64_t& flat, size_t& budget, bool& cut, std::string& out) {
  out += "[";
  for (int64_t i = 0; i < t.shape()[d] && !cut; ++i) {
    if (i) out += " ";
    if (d + 1 < t.rank()) {
      printLevel(t, d + 1, flat, budget, cut, out);
    } else if (budget == 0) {
      out += "...";
      cut = true;
    } else {
      out += element(t, flat++);
      --budget;
    }
  }
  out += "]";
}
}  // namespace

std::string Tensor::toString(size_t maxElements) const {
  std::string out = shapeString(shape_);
  out += (shape_.empty() ? "" : "x") + std::string(dtypeShortName(dtype_)) + "=";
  if (!defined()) return out + "<undefined>";
  // GPU memory is not readable here; the VM copies results to the host to print them.
  if (device_.kind != Device::Kind::CPU) return out + "<on " + device_.toString() + ">";
  if (shape_.empty()) return out + element(*this, 0);
  int64_t flat = 0;
  size_t budget = maxElements;
  bool cut = false;
  printLevel(*this, 0, flat, budget, cut, out);
  return out;
}

}  // namespace kiln
