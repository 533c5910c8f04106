// Shared pieces of operator shape rules.
#include "kernel_ir/shape_util.h"

namespace kiln::ops {

std::string dimToString(int64_t d) { return d == kAnyDim ? "?" : std::to_string(d); }

std::string shapeToString(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += dimToString(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

std::string descToString(const TensorDesc& d) {
  if (d.shape.empty()) return std::string(dtypeName(d.dtype));
  return "Tensor[" + shapeToString(d.shape) + ", " + std::string(dtypeName(d.dtype)) + "]";
}

void opFail(const OpCall& call, const std::string& what) { throw OpError(call.op.name + ": " + what); }

int64_t normalizeAxis(const OpCall& call, int64_t axis, size_t rank, std::string_view attr, bool inclusive) {
  int64_t r = static_cast<int64_t>(rank) + (inclusive ? 1 : 0);
  if (axis < -r || axis >= r)
    opFail(call, std::string(attr) + "=" + std::to_string(axis) + " is out of range for an operand of rank " +
                     std::to_string(rank));
  return axis < 0 ? axis + r : axis;
}

bool dimsCompatible(int64_t a, int64_t b) { return a == b || a == kAnyDim || b == kAnyDim; }
int64_t mergeDims(int64_t a, int64_t b) { return a == kAnyDim ? b : a; }

Shape broadcastShapes(const OpCall& call, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db) out[i] = da;
    else if (da == 1) out[i] = db;
    else if (db == 1) out[i] = da;
    else if (da == kAnyDim) out[i] = db;
    else if (db == kAnyDim) out[i] = da;
    else opFail(call, "shapes " + shapeToString(a) + " and " + shapeToString(b) + " do not broadcast");
  }
  return out;
}

int64_t numElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d == kAnyDim) return kAnyDim;
    n *= d;
  }
  return n;
}

std::string attrShape(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::array<int64_t, 2> pairAttr(const AttrReader& attrs, std::string_view name, int64_t dflt) {
  auto v = attrs.getIntList(name).value_or(std::vector<int64_t>{dflt, dflt});
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) attrs.fail(name, "must have 1 or 2 elements");
  if (v[0] < 1 || v[1] < 1) attrs.fail(name, "must be positive");
  return {v[0], v[1]};
}

Window2d windowAttrs(const AttrReader& attrs) {
  Window2d w;
  w.strides = pairAttr(attrs, "strides", 1);
  w.dilation = pairAttr(attrs, "dilation", 1);
  auto p = attrs.getIntList("padding").value_or(std::vector<int64_t>{0, 0});
  for (int64_t v : p)
    if (v < 0) attrs.fail("padding", "must not be negative");
  if (p.size() == 1) w.pad = {p[0], p[0], p[0], p[0]};
  else if (p.size() == 2) w.pad = {p[0], p[1], p[0], p[1]};
  else if (p.size() == 4) w.pad = {p[0], p[1], p[2], p[3]};
  else attrs.fail("padding", "must have 1, 2 or 4 elements");
  return w;
}

void requireDType(const OpCall& call, const TensorDesc& t, DTypeClass cls, std::string_view operand) {
  bool ok = true;
  const char* want = "";
  switch (cls) {
    case DTypeClass::Any: break;
    case DTypeClass::Float: ok = isFloat(t.dtype); want = "a float"; break;
    case DTypeClass::Numeric: ok = !isBool(t.dtype); want = "a numeric"; break;
    case DTypeClass::Int: ok = isInt(t.dtype); want = "an integer"; break;
    case DTypeClass::Bool: ok = isBool(t.dtype); want = "a bool"; break;
    case DTypeClass::IntOrBool: ok = isInt(t.dtype) || isBool(t.dtype); want = "an integer or bool"; break;
  }
  if (!ok)
    opFail(call, std::string(operand) + " must have " + want + " dtype, but has " + std::string(dtypeName(t.dtype)));
}

void requireSameDType(const OpCall& call, const TensorDesc& a, const TensorDesc& b) {
  if (a.dtype != b.dtype)
    opFail(call, "operand dtypes differ: " + std::string(dtypeName(a.dtype)) + " and " +
                     std::string(dtypeName(b.dtype)));
}

void requireRank(const OpCall& call, const TensorDesc& t, size_t rank, std::string_view operand) {
  if (t.rank() != rank)
    opFail(call, std::string(operand) + " must have rank " + std::to_string(rank) + ", but has type " +
                     descToString(t));
}

}  // namespace kiln::ops

namespace kiln::ops {

bool shapeInBounds(std::span<const int64_t> shape) {
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d == kAnyDim) continue;
    if (d < 0 || d > kMaxDimension) return false;
    if (__builtin_mul_overflow(elements, d, &elements) || elements > kMaxDimension) return false;
  }
  return true;
}

}  // namespace kiln::ops
