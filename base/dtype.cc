// Names and sizes of element types.
#include "kiln/dtype.h"

#include <cmath>
#include <cstdint>

namespace kiln {

namespace {
struct DTypeInfo {
  std::string_view name;
  std::string_view shortName;
};
constexpr DTypeInfo kInfo[kNumDTypes] = {
    {"float16", "f16"}, {"float32", "f32"}, {"float64", "f64"}, {"int8", "i8"},  {"int16", "i16"},
    {"int32", "i32"},   {"int64", "i64"},   {"uint8", "u8"},    {"bool", "bool"}, {"uint16", "u16"},
};
}  // namespace

std::string_view dtypeName(DType t) { return kInfo[static_cast<int>(t)].name; }
std::string_view dtypeShortName(DType t) { return kInfo[static_cast<int>(t)].shortName; }

std::optional<DType> parseDType(std::string_view name) {
  if (name == "int") return DType::Int32;  // TVM's alias
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].name == name || kInfo[i].shortName == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

bool intFits(DType t, int64_t v) {
  switch (t) {
    case DType::Int8: return v >= INT8_MIN && v <= INT8_MAX;
    case DType::Int16: return v >= INT16_MIN && v <= INT16_MAX;
    case DType::Int32: return v >= INT32_MIN && v <= INT32_MAX;
    case DType::UInt8: return v >= 0 && v <= UINT8_MAX;
    case DType::UInt16: return v >= 0 && v <= UINT16_MAX;
    case DType::Bool: return v == 0 || v == 1;
    case DType::Int64:
    case DType::Float16:
    case DType::Float32:
    case DType::Float64: return true;
  }
  return false;
}

bool floatFits(DType t, double v) {
  if (!std::isfinite(v)) return true;
  // The largest finite value as it is usually written (float32's 3.40282347e38
  // printed to 8 digits is 3.4028235e38); anything larger overflows.
  double max = t == DType::Float16 ? 65504.0 : t == DType::Float32 ? 3.4028235e38 : 1.7976931348623157e308;
  return std::fabs(v) <= max;
}

}  // namespace kiln
