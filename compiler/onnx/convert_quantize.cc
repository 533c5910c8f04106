// ONNX quantization operators (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear)
// and BitShift, composed from rounding, clipping and casts.
#include <cmath>

#include "compiler/onnx/graph_importer.h"

namespace kiln::onnx_import {
namespace {

// A per-axis scale or zero point ([C]) laid along `axis` of a rank-`rank` input;
// a scalar as it is.
std::string alongAxis(NodeContext& c, size_t input, size_t rank, int64_t axis) {
  const Value& v = c.input(input);
  std::string r = c.ref(input);
  if (!v.shape || v.shape->size() != 1 || rank < 2) return r;
  std::vector<int64_t> shape(rank, 1);
  shape[static_cast<size_t>(axis)] = -1;
  return "reshape(" + r + ", newshape=" + intList(shape) + ")";
}

std::pair<double, double> saturation(DType t) {
  if (t == DType::UInt8) return {0, 255};
  if (t == DType::Int8) return {-128, 127};
  if (t == DType::Int32) return {-2147483648.0, 2147483647.0};
  return {0, 65535};
}

}  // namespace

void registerQuantizeConverters(std::map<std::string, Converter>& t) {
  t["QuantizeLinear"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    if (!x.shape) c.fail("the input's rank must be known");
    size_t rank = x.shape->size();
    int64_t axis = rank ? c.axis(c.intAttr("axis", 1), rank) : 0;
    DType out = c.hasInput(2) ? c.input(2).dtype : DType::UInt8;
    if (out != DType::UInt8 && out != DType::Int8) c.fail("the zero point must be uint8 or int8");
    std::string q = "round(divide(" + c.ref(0) + ", " + alongAxis(c, 1, rank, axis) + "))";
    if (c.hasInput(2)) q = "add(" + q + ", cast(" + alongAxis(c, 2, rank, axis) + ", dtype=\"" + std::string(dtypeName(x.dtype)) + "\"))";
    auto [lo, hi] = saturation(out);
    c.emit(0, "cast(clip(" + q + ", a_min=" + floatText(lo) + ", a_max=" + floatText(hi) + "), dtype=\"" + std::string(dtypeName(out)) + "\")",
           out, x.shape);
  };
  t["DequantizeLinear"] = [](NodeContext& c) {
    const Value& x = c.input(0);
    if (!x.shape) c.fail("the input's rank must be known");
    size_t rank = x.shape->size();
    int64_t axis = rank ? c.axis(c.intAttr("axis", 1), rank) : 0;
    DType f = c.input(1).dtype;
    std::string fx = "cast(" + c.ref(0) + ", dtype=\"" + std::string(dtypeName(f)) + "\")";
    if (c.hasInput(2)) fx = "subtract(" + fx + ", cast(" + alongAxis(c, 2, rank, axis) + ", dtype=\"" + std::string(dtypeName(f)) + "\"))";
    c.emit(0, "multiply(" + fx + ", " + alongAxis(c, 1, rank, axis) + ")", f, x.shape);
  };
  t["DynamicQuantizeLinear"] = [](NodeContext& c) {
    // The range always holds 0; scale spreads it over uint8, the zero point maps 0.
    const Value& x = c.input(0);
    std::string rx = c.ref(0), zero = c.literal(0, x.dtype);
    std::string lo = c.let("minimum(min(" + rx + "), " + zero + ")"), hi = c.let("maximum(max(" + rx + "), " + zero + ")");
    std::string scale = c.let("divide(subtract(" + hi + ", " + lo + "), " + c.literal(255, x.dtype) + ")");
    std::string zp = c.let("clip(round(divide(negative(" + lo + "), " + scale + ")), a_min=0f, a_max=255f)");
    c.emit(0, "cast(clip(add(round(divide(" + rx + ", " + scale + ")), " + zp + "), a_min=0f, a_max=255f), dtype=\"uint8\")", DType::UInt8, x.shape);
    c.emit(1, "copy(" + scale + ")", x.dtype, std::vector<int64_t>{});
    c.emit(2, "cast(" + zp + ", dtype=\"uint8\")", DType::UInt8, std::vector<int64_t>{});
  };
  t["BitShift"] = [](NodeContext& c) {
    // Shifts by y are products and quotients by 2^y (exact in float64 for these widths).
    const Value& x = c.input(0);
    std::string dt = std::string(dtypeName(x.dtype));
    std::string pow2 = "cast(power(2f64, cast(" + c.ref(1) + ", dtype=\"float64\")), dtype=\"" + dt + "\")";
    bool left = c.stringAttr("direction", "") == "LEFT";
    if (!left && c.stringAttr("direction", "") != "RIGHT") c.fail("direction must be LEFT or RIGHT");
    c.emit(0, std::string(left ? "multiply(" : "divide(") + c.ref(0) + ", " + pow2 + ")", x.dtype, x.shape);
  };
}

}  // namespace kiln::onnx_import
