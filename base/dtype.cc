// Names and sizes of element types.
#include "kiln/dtype.h"

namespace kiln {

namespace {
struct DTypeInfo {
  std::string_view name;
  std::string_view shortName;
  size_t size;
};
constexpr DTypeInfo kInfo[kNumDTypes] = {
    {"float16", "f16", 2}, {"float32", "f32", 4}, {"float64", "f64", 8}, {"int8", "i8", 1},  {"int16", "i16", 2},
    {"int32", "i32", 4},   {"int64", "i64", 8},   {"uint8", "u8", 1},    {"bool", "bool", 1},
};
}  // namespace

std::string_view dtypeName(DType t) { return kInfo[static_cast<int>(t)].name; }
std::string_view dtypeShortName(DType t) { return kInfo[static_cast<int>(t)].shortName; }
size_t dtypeSize(DType t) { return kInfo[static_cast<int>(t)].size; }

std::optional<DType> parseDType(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].name == name || kInfo[i].shortName == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace kiln
