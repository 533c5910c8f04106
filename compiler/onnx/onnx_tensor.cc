// TensorProto <-> kiln::Tensor, with every size from the file checked first.
#include "compiler/onnx/onnx_tensor.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <onnx/onnx_pb.h>

#include "kiln/error.h"
#include "kiln/half.h"

namespace kiln::onnx_import {
namespace {

using TP = onnx::TensorProto;

Error tensorError(const TP& t, const std::string& why) {
  return Error("ONNX tensor '" + t.name() + "': " + why);
}

// External data: `location` relative to the model's folder, never leaving it.
std::string readExternal(const TP& t, const std::string& baseDir, uint64_t bytes) {
  if (baseDir.empty()) throw tensorError(t, "has external data, which needs the model's file path");
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const auto& kv : t.external_data()) {
    auto number = [&]() -> uint64_t {
      const std::string& v = kv.value();
      if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
        throw tensorError(t, "external data " + kv.key() + " '" + v + "' is not a byte count");
      return std::stoull(v);
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number();
    else if (kv.key() == "length") length = number();
  }
  namespace fs = std::filesystem;
  fs::path rel(location);
  if (location.empty() || rel.is_absolute()) throw tensorError(t, "external data location '" + location + "' must be a relative path");
  for (const auto& part : rel)
    if (part == "..") throw tensorError(t, "external data location '" + location + "' leaves the model's folder");
  if (length && *length != bytes)
    throw tensorError(t, "external data length " + std::to_string(*length) + " differs from its shape's " + std::to_string(bytes) + " bytes");
  fs::path file = fs::path(baseDir) / rel;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw tensorError(t, "external data file '" + file.string() + "' is missing");
  uint64_t size = fs::file_size(file, ec);
  if (ec || offset > size || bytes > size - offset)
    throw tensorError(t, "external data file '" + file.string() + "' is too short for offset " + std::to_string(offset) +
                             " and " + std::to_string(bytes) + " bytes");
  std::ifstream in(file, std::ios::binary);
  std::string out(bytes, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(out.data(), static_cast<std::streamsize>(bytes))) throw tensorError(t, "cannot read external data file '" + file.string() + "'");
  return out;
}

template <class Src>
void storeAll(const Src& values, const Tensor& out) {
  char* p = static_cast<char*>(out.data());
  size_t step = dtypeSize(out.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto v = values[static_cast<int>(i)];
    if constexpr (std::is_floating_point_v<decltype(v)>) writeScalar(p + i * step, out.dtype(), 0, v);
    else writeScalar(p + i * step, out.dtype(), static_cast<int64_t>(v), 0);
  }
}

}  // namespace

std::optional<DType> dtypeFromOnnx(int onnxType) {
  switch (onnxType) {
    case TP::FLOAT: return DType::Float32;
    case TP::DOUBLE: return DType::Float64;
    case TP::FLOAT16: return DType::Float16;
    case TP::INT8: return DType::Int8;
    case TP::INT16: return DType::Int16;
    case TP::INT32: return DType::Int32;
    case TP::INT64: return DType::Int64;
    case TP::UINT8: return DType::UInt8;
    case TP::UINT16: return DType::UInt16;
    case TP::BOOL: return DType::Bool;
    default: return std::nullopt;
  }
}

int dtypeToOnnx(DType t) {
  switch (t) {
    case DType::Float32: return TP::FLOAT;
    case DType::Float64: return TP::DOUBLE;
    case DType::Float16: return TP::FLOAT16;
    case DType::Int8: return TP::INT8;
    case DType::Int16: return TP::INT16;
    case DType::Int32: return TP::INT32;
    case DType::Int64: return TP::INT64;
    case DType::UInt8: return TP::UINT8;
    case DType::UInt16: return TP::UINT16;
    case DType::Bool: return TP::BOOL;
  }
  return TP::UNDEFINED;
}

std::string onnxTypeName(int onnxType) {
  if (TP::DataType_IsValid(onnxType)) return TP::DataType_Name(static_cast<TP::DataType>(onnxType));
  return "type " + std::to_string(onnxType);
}

Tensor tensorFromProto(const TP& t, const std::string& baseDir) {
  auto dtype = dtypeFromOnnx(t.data_type());
  if (!dtype) throw tensorError(t, "element type " + onnxTypeName(t.data_type()) + " is not supported");
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) throw tensorError(t, "has a negative dimension " + std::to_string(d));
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count) || count > (uint64_t(1) << 48))
      throw tensorError(t, "has more elements than memory can hold");
  }
  uint64_t bytes = count * dtypeSize(*dtype);
  auto wrongCount = [&](size_t have) {
    return tensorError(t, "holds " + std::to_string(have) + " values for a shape of " + std::to_string(count));
  };
  if (t.data_location() == TP::EXTERNAL) {
    std::string data = readExternal(t, baseDir, bytes);
    Tensor out = Tensor::empty(*dtype, shape);
    if (bytes) std::memcpy(out.data(), data.data(), bytes);
    return out;
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes) throw tensorError(t, "raw data holds " + std::to_string(t.raw_data().size()) +
                                                            " bytes for a shape of " + std::to_string(bytes));
    Tensor out = Tensor::empty(*dtype, shape);
    if (bytes) std::memcpy(out.data(), t.raw_data().data(), bytes);
    return out;
  }
  Tensor out;
  auto check = [&](int have) {
    if (static_cast<uint64_t>(have) != count) throw wrongCount(static_cast<size_t>(have));
    out = Tensor::empty(*dtype, shape);
  };
  switch (t.data_type()) {
    case TP::FLOAT: check(t.float_data_size()); storeAll(t.float_data(), out); break;
    case TP::DOUBLE: check(t.double_data_size()); storeAll(t.double_data(), out); break;
    case TP::INT64: check(t.int64_data_size()); storeAll(t.int64_data(), out); break;
    case TP::FLOAT16: {
      // float16 values travel as their 16 bits in int32_data.
      check(t.int32_data_size());
      auto* p = out.data<uint16_t>();
      for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
      break;
    }
    default: check(t.int32_data_size()); storeAll(t.int32_data(), out); break;
  }
  return out;
}

void tensorToProto(const Tensor& t, TP& out) {
  out.set_data_type(dtypeToOnnx(t.dtype()));
  out.clear_dims();
  for (int64_t d : t.shape()) out.add_dims(d);
  out.set_raw_data(std::string(static_cast<const char*>(t.data()), t.nbytes()));
}

}  // namespace kiln::onnx_import
