// Helpers that operator shape rules share: axes, broadcasting, dimension arithmetic
// in the presence of `?`, and error text.
#pragma once

#include <array>
#include <string>

#include "kernel_ir/op.h"

namespace kiln::ops {

std::string dimToString(int64_t d);
std::string shapeToString(const Shape& s);        // (2, ?, 4)
std::string descToString(const TensorDesc& d);    // Tensor[(2, ?, 4), float32]

[[noreturn]] void opFail(const OpCall& call, const std::string& what);

// Maps a possibly negative axis into [0, rank); rank+1 values when `inclusive`
// (expand_dims, stack insert a new axis).
int64_t normalizeAxis(const OpCall& call, int64_t axis, size_t rank, std::string_view attr = "axis",
                      bool inclusive = false);

// Numpy broadcasting of two shapes; `?` broadcasts against 1 as `?` and against n as n.
Shape broadcastShapes(const OpCall& call, const Shape& a, const Shape& b);

// Two dimensions that must agree: equal, or one of them unknown. Returns the more precise.
bool dimsCompatible(int64_t a, int64_t b);
int64_t mergeDims(int64_t a, int64_t b);

// Product of dimensions; kAnyDim if any is unknown.
int64_t numElements(const Shape& s);

// An attribute list as written: [1, -1].
std::string attrShape(const std::vector<int64_t>& v);

// The spatial window attributes of conv2d and pooling, validated (OpError otherwise):
// strides and dilation as [h, w] (one value applies to both), padding as
// [top, left, bottom, right] from 1, 2 or 4 values.
struct Window2d {
  std::array<int64_t, 2> strides{1, 1}, dilation{1, 1};
  std::array<int64_t, 4> pad{0, 0, 0, 0};
};
Window2d windowAttrs(const AttrReader& attrs);
// A positive [h, w] pair attribute (pool_size, strides, dilation).
std::array<int64_t, 2> pairAttr(const AttrReader& attrs, std::string_view name, int64_t dflt);

// Requires `t` to be one of the dtype classes.
enum class DTypeClass { Any, Float, Numeric, Int, Bool, IntOrBool };
void requireDType(const OpCall& call, const TensorDesc& t, DTypeClass cls, std::string_view operand);
void requireSameDType(const OpCall& call, const TensorDesc& a, const TensorDesc& b);
void requireRank(const OpCall& call, const TensorDesc& t, size_t rank, std::string_view operand);

}  // namespace kiln::ops
