// Element types of tensors, shared by the compiler, the executable format and the VM.
//
// A DType is a one-byte enum; its numeric values are part of the executable file
// format, so new types are only ever appended.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t {
  Float16 = 0,
  Float32 = 1,
  Float64 = 2,
  Int8 = 3,
  Int16 = 4,
  Int32 = 5,
  Int64 = 6,
  UInt8 = 7,
  Bool = 8,
  UInt16 = 9,
};

inline constexpr int kNumDTypes = 10;

// The Relay spelling: "float32", "int64", "bool", ...
std::string_view dtypeName(DType t);
// The short spelling used by vmrun's input specs: "f32", "i64", "bool", ...
std::string_view dtypeShortName(DType t);
// Parses either spelling; nullopt for anything else.
std::optional<DType> parseDType(std::string_view name);

// Bytes of one element. Inline: every tensor's byte count (each kernel call's
// checks, each recycled output) asks, and a call per ask showed in profiles.
inline constexpr uint8_t kDTypeSizes[kNumDTypes] = {2, 4, 8, 1, 2, 4, 8, 1, 1, 2};
inline size_t dtypeSize(DType t) { return kDTypeSizes[static_cast<uint8_t>(t)]; }
inline bool isFloat(DType t) { return t == DType::Float16 || t == DType::Float32 || t == DType::Float64; }
inline bool isInt(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64 || t == DType::UInt8 ||
         t == DType::UInt16;
}
// Unsigned integer types (bool counts as unsigned where kernels compare or divide).
inline bool isUnsignedInt(DType t) { return t == DType::UInt8 || t == DType::UInt16; }
inline bool isBool(DType t) { return t == DType::Bool; }

// Whether integer `v` is a value of `t` without wrapping (bool: 0 or 1; float
// types: any integer, rounded). Readers of user input check it before storing.
bool intFits(DType t, int64_t v);
// Whether `v` is a value of the float type `t` without overflowing to infinity:
// at most its largest finite value, as that is usually written (65504 for
// float16, 3.4028235e38 for float32). Infinities and NaN themselves fit.
bool floatFits(DType t, double v);

}  // namespace kiln
