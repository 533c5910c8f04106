// Shape and data-movement operators: reshape, transpose, expand_dims, squeeze,
// concatenate, stack, split, strided_slice, take, broadcast_to, tile, reverse, nn.pad.
#include <algorithm>
#include <limits>

#include "kernel_ir/compute.h"
#include "ops/registry.h"
#include "kernel_ir/shape_util.h"

namespace kiln::ops {
namespace {

// TVM's reshape: 0 copies a dimension, -1 infers one, -2 copies the rest, -3 merges
// two dimensions, -4 splits one into the next two entries.
std::vector<TensorDesc> reshapeRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  std::vector<int64_t> ns = call.attrs.requireIntList("newshape");
  bool allowZero = call.attrs.getBool("allowzero", false);
  Shape out;
  int64_t inferAt = -1;
  size_t src = 0;
  for (size_t i = 0; i < ns.size(); ++i) {
    int64_t v = ns[i];
    if (v > 0 || (v == 0 && allowZero)) {
      out.push_back(v);
      ++src;
    } else if (v == 0) {
      if (src >= x.rank()) call.attrs.fail("newshape", "copies dimension " + std::to_string(src) + " of a rank " + std::to_string(x.rank()) + " operand");
      out.push_back(x.shape[src++]);
    } else if (v == -1) {
      if (inferAt >= 0) call.attrs.fail("newshape", "may contain -1 only once");
      inferAt = static_cast<int64_t>(out.size());
      out.push_back(kAnyDim);
      ++src;
    } else if (v == -2) {
      for (; src < x.rank(); ++src) out.push_back(x.shape[src]);
    } else if (v == -3) {
      if (src + 1 >= x.rank()) call.attrs.fail("newshape", "uses -3 past the operand's last two dimensions");
      int64_t a = x.shape[src], b = x.shape[src + 1];
      out.push_back(a == kAnyDim || b == kAnyDim ? kAnyDim : a * b);
      src += 2;
    } else if (v == -4) {
      if (i + 2 >= ns.size() || src >= x.rank()) call.attrs.fail("newshape", "uses -4 without two following entries");
      int64_t d = x.shape[src++], a = ns[i + 1], b = ns[i + 2];
      if (a == -1 && b == -1) call.attrs.fail("newshape", "-4 may infer only one of its two factors");
      if (a == -1) a = d == kAnyDim ? kAnyDim : d / b;
      if (b == -1) b = d == kAnyDim ? kAnyDim : d / a;
      if (d != kAnyDim && a != kAnyDim && b != kAnyDim && a * b != d)
        call.attrs.fail("newshape", "splits a dimension of " + std::to_string(d) + " into " + std::to_string(a) +
                                        " x " + std::to_string(b));
      out.push_back(a);
      out.push_back(b);
      i += 2;
    } else {
      call.attrs.fail("newshape", "contains the invalid value " + std::to_string(v));
    }
  }
  int64_t inCount = numElements(x.shape);
  if (inferAt >= 0) {
    int64_t known = 1;
    bool dynamic = inCount == kAnyDim;
    for (size_t i = 0; i < out.size(); ++i) {
      if (static_cast<int64_t>(i) == inferAt) continue;
      if (out[i] == kAnyDim) dynamic = true;
      else known *= out[i];
    }
    if (!dynamic) {
      if (known == 0 || inCount % known != 0)
        call.attrs.fail("newshape", "cannot reshape " + shapeToString(x.shape) + " to " + attrShape(ns));
      out[inferAt] = inCount / known;
    }
  }
  int64_t outCount = numElements(out);
  if (inCount != kAnyDim && outCount != kAnyDim && inCount != outCount)
    call.attrs.fail("newshape", "cannot reshape " + shapeToString(x.shape) + " (" + std::to_string(inCount) +
                                    " elements) to " + shapeToString(out) + " (" + std::to_string(outCount) + " elements)");
  return {TensorDesc{x.dtype, out}};
}

// TVM's layout_transform between layouts that name the same axes in another
// order ("NCHW" to "NHWC"): a transpose. Split layouts (NCHW16c) are not supported.
std::vector<size_t> layoutPermutation(const AttrReader& attrs, size_t rank) {
  std::string src = attrs.getString("src_layout", ""), dst = attrs.getString("dst_layout", "");
  auto plain = [](const std::string& l) {
    for (char ch : l)
      if (ch < 'A' || ch > 'Z') return false;
    return !l.empty();
  };
  if (!plain(src)) attrs.fail("src_layout", "= \"" + src + "\" is not a layout of upper-case axis letters (split layouts such as NCHW16c are not supported)");
  if (!plain(dst)) attrs.fail("dst_layout", "= \"" + dst + "\" is not a layout of upper-case axis letters (split layouts such as NCHW16c are not supported)");
  if (src.size() != rank) attrs.fail("src_layout", "= \"" + src + "\" names " + std::to_string(src.size()) + " axes for a tensor of rank " + std::to_string(rank));
  std::string a = src, b = dst;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b || std::adjacent_find(a.begin(), a.end()) != a.end())
    attrs.fail("dst_layout", "= \"" + dst + "\" does not name the axes of \"" + src + "\" once each");
  std::vector<size_t> perm;  // output axis d reads input axis perm[d]
  for (char ch : dst) perm.push_back(src.find(ch));
  return perm;
}

std::vector<TensorDesc> layoutTransformRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  Shape out;
  for (size_t p : layoutPermutation(call.attrs, x.rank())) out.push_back(x.shape[p]);
  return {TensorDesc{x.dtype, out}};
}

std::vector<TensorDesc> transposeRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  auto axes = call.attrs.getIntList("axes");
  Shape out;
  if (!axes) {
    out.assign(x.shape.rbegin(), x.shape.rend());
    return {TensorDesc{x.dtype, out}};
  }
  if (axes->size() != x.rank())
    call.attrs.fail("axes", "has " + std::to_string(axes->size()) + " entries for an operand of rank " + std::to_string(x.rank()));
  std::vector<bool> seen(x.rank(), false);
  for (int64_t a : *axes) {
    int64_t n = normalizeAxis(call, a, x.rank(), "axes");
    if (seen[n]) call.attrs.fail("axes", "is not a permutation");
    seen[n] = true;
    out.push_back(x.shape[n]);
  }
  return {TensorDesc{x.dtype, out}};
}

std::vector<TensorDesc> expandDimsRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  if (!call.attrs.has("axis")) call.attrs.fail("axis", "is required");
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank(), "axis", true);
  int64_t n = call.attrs.getInt("num_newaxis", 1);
  if (n < 0) call.attrs.fail("num_newaxis", "must not be negative");
  Shape out(x.shape.begin(), x.shape.end());
  out.insert(out.begin() + axis, static_cast<size_t>(n), 1);
  return {TensorDesc{x.dtype, out}};
}

std::vector<TensorDesc> squeezeRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  auto axes = call.attrs.getIntList("axis");
  std::vector<bool> drop(x.rank(), false);
  if (!axes) {
    for (size_t i = 0; i < x.rank(); ++i) drop[i] = x.shape[i] == 1;
  } else {
    for (int64_t a : *axes) {
      int64_t n = normalizeAxis(call, a, x.rank());
      if (x.shape[n] != 1 && x.shape[n] != kAnyDim)
        call.attrs.fail("axis", "names dimension " + std::to_string(a) + " of size " + std::to_string(x.shape[n]) +
                                    ", which is not 1");
      drop[n] = true;
    }
  }
  Shape out;
  for (size_t i = 0; i < x.rank(); ++i)
    if (!drop[i]) out.push_back(x.shape[i]);
  return {TensorDesc{x.dtype, out}};
}

void requireSameFields(const OpCall& call) {
  if (call.inputs.empty()) opFail(call, "needs at least one tensor in its tuple");
  for (const TensorDesc& t : call.inputs) {
    requireSameDType(call, call.inputs[0], t);
    if (t.rank() != call.inputs[0].rank())
      opFail(call, "tuple fields differ in rank: " + descToString(call.inputs[0]) + " and " + descToString(t));
  }
}

std::vector<TensorDesc> concatenateRule(const OpCall& call) {
  requireSameFields(call);
  const TensorDesc& first = call.inputs[0];
  if (first.rank() == 0) opFail(call, "cannot concatenate scalars");
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 0), first.rank());
  TensorDesc out = first;
  int64_t total = 0;
  for (const TensorDesc& t : call.inputs) {
    for (size_t i = 0; i < t.rank(); ++i) {
      if (static_cast<int64_t>(i) == axis) continue;
      if (!dimsCompatible(out.shape[i], t.shape[i]))
        opFail(call, "fields " + descToString(first) + " and " + descToString(t) + " differ outside axis " +
                         std::to_string(axis));
      out.shape[i] = mergeDims(out.shape[i], t.shape[i]);
    }
    total = (total == kAnyDim || t.shape[axis] == kAnyDim) ? kAnyDim : total + t.shape[axis];
  }
  out.shape[axis] = total;
  return {out};
}

std::vector<TensorDesc> stackRule(const OpCall& call) {
  requireSameFields(call);
  TensorDesc out = call.inputs[0];
  for (const TensorDesc& t : call.inputs) {
    for (size_t i = 0; i < t.rank(); ++i) {
      if (!dimsCompatible(out.shape[i], t.shape[i]))
        opFail(call, "fields " + descToString(call.inputs[0]) + " and " + descToString(t) + " differ in shape");
      out.shape[i] = mergeDims(out.shape[i], t.shape[i]);
    }
  }
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 0), out.rank(), "axis", true);
  out.shape.insert(out.shape.begin() + axis, static_cast<int64_t>(call.inputs.size()));
  return {out};
}

std::vector<TensorDesc> splitRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  if (x.rank() == 0) opFail(call, "cannot split a scalar");
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank());
  int64_t dim = x.shape[axis];
  const AttrValue* ios = call.attrs.map().find("indices_or_sections");
  if (!ios) call.attrs.fail("indices_or_sections", "is required");
  std::vector<TensorDesc> outs;
  if (ios->kind == AttrValue::Kind::Int) {
    int64_t sections = ios->i;
    if (sections < 1) call.attrs.fail("indices_or_sections", "must be positive");
    if (dim != kAnyDim && dim % sections != 0)
      call.attrs.fail("indices_or_sections", "= " + std::to_string(sections) + " does not divide the axis extent " +
                                                 std::to_string(dim));
    TensorDesc piece = x;
    piece.shape[axis] = dim == kAnyDim ? kAnyDim : dim / sections;
    outs.assign(static_cast<size_t>(sections), piece);
    return outs;
  }
  std::vector<int64_t> idx = call.attrs.requireIntList("indices_or_sections");
  int64_t prev = 0;
  for (size_t k = 0; k <= idx.size(); ++k) {
    TensorDesc piece = x;
    if (k < idx.size()) {
      if (idx[k] < prev) call.attrs.fail("indices_or_sections", "must be increasing");
      if (dim != kAnyDim && idx[k] > dim) call.attrs.fail("indices_or_sections", "exceeds the axis extent " + std::to_string(dim));
      piece.shape[axis] = idx[k] - prev;
      prev = idx[k];
    } else {
      piece.shape[axis] = dim == kAnyDim ? kAnyDim : dim - prev;
    }
    outs.push_back(piece);
  }
  return outs;
}

// One axis of strided_slice with TVM's clamping rules.
int64_t sliceExtent(int64_t dim, int64_t begin, int64_t end, int64_t stride, bool sizeMode) {
  if (dim == kAnyDim) return kAnyDim;
  if (sizeMode) {
    if (begin < 0) begin += dim;
    begin = std::clamp<int64_t>(begin, 0, dim);
    int64_t stop = end < 0 ? dim : std::min(dim, begin + end);
    return std::max<int64_t>(0, stop - begin);
  }
  auto norm = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v += dim;
    return std::clamp(v, lo, hi);
  };
  if (stride > 0) {
    int64_t b = norm(begin, 0, dim), e = norm(end, 0, dim);
    return e > b ? (e - b + stride - 1) / stride : 0;
  }
  int64_t b = norm(begin, -1, dim - 1), e = norm(end, -1, dim - 1);
  // For a negative stride, an end of -1 after normalization means "before index 0".
  if (end < -dim) e = -1;
  return b > e ? (b - e + (-stride) - 1) / (-stride) : 0;
}

std::vector<TensorDesc> stridedSliceRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  std::vector<int64_t> begin = call.attrs.requireIntList("begin");
  std::vector<int64_t> end = call.attrs.requireIntList("end");
  std::vector<int64_t> strides = call.attrs.getIntList("strides").value_or(std::vector<int64_t>{});
  bool sizeMode = call.attrs.getChoice("slice_mode", {"end", "size"}) == "size";
  std::vector<int64_t> axes;
  if (auto a = call.attrs.getIntList("axes")) {
    for (int64_t v : *a) axes.push_back(normalizeAxis(call, v, x.rank(), "axes"));
  } else {
    for (size_t i = 0; i < std::max(begin.size(), end.size()) && i < x.rank(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (begin.size() > x.rank()) call.attrs.fail("begin", "has more entries than the operand has dimensions");
  }
  if (begin.size() != axes.size() && !call.attrs.has("axes") ) begin.resize(axes.size(), 0);
  if (begin.size() != axes.size()) call.attrs.fail("begin", "must have one entry per sliced axis");
  Shape out(x.shape.begin(), x.shape.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t ax = axes[k];
    int64_t stride = strides.empty() ? 1 : (k < strides.size() ? strides[k] : strides.back());
    if (stride == 0) call.attrs.fail("strides", "must not contain 0");
    int64_t e = k < end.size() ? end[k] : (stride > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min());
    out[ax] = sliceExtent(x.shape[ax], begin[k], e, stride, sizeMode);
  }
  return {TensorDesc{x.dtype, out}};
}

// TVM's gather (ONNX GatherElements, torch.gather): out[i] = data[i with axis replaced
// by indices[i]]. Indices have data's rank and fit inside data on every other axis.
std::vector<TensorDesc> gatherRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  const TensorDesc& idx = call.inputs[1];
  requireDType(call, idx, DTypeClass::Int, "indices");
  if (idx.rank() != x.rank())
    opFail(call, "indices must have the data's rank " + std::to_string(x.rank()) + ", not " + std::to_string(idx.rank()));
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank());
  for (size_t d = 0; d < x.rank(); ++d) {
    if (static_cast<int64_t>(d) == axis || x.shape[d] == kAnyDim || idx.shape[d] == kAnyDim) continue;
    if (idx.shape[d] > x.shape[d])
      opFail(call, "indices' dimension " + std::to_string(d) + " (" + std::to_string(idx.shape[d]) + ") exceeds the data's (" +
                       std::to_string(x.shape[d]) + ")");
  }
  if (x.shape[static_cast<size_t>(axis)] == 0 && numElements(idx.shape) != 0 && numElements(idx.shape) != kAnyDim)
    opFail(call, "gathers from an empty axis");
  return {TensorDesc{x.dtype, idx.shape}};
}

std::vector<TensorDesc> takeRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  const TensorDesc& idx = call.inputs[1];
  requireDType(call, idx, DTypeClass::Int, "indices");
  call.attrs.getChoice("mode", {"clip", "wrap", "fast"});
  if (call.attrs.getInt("batch_dims", 0) != 0) call.attrs.fail("batch_dims", "other than 0 is not supported");
  // Taking anything from nothing has no element to read, whatever the mode
  // (checked with concrete shapes at run time when a dimension is `?`).
  auto nonEmptyFromEmpty = [&](int64_t extent, const Shape& out) {
    int64_t n = numElements(out);
    if (extent == 0 && n != kAnyDim && n > 0)
      opFail(call, "takes " + std::to_string(n) + " element(s) from an empty " + (call.attrs.has("axis") ? "axis" : "tensor") +
                       " of " + shapeToString(x.shape));
  };
  if (!call.attrs.has("axis")) {
    nonEmptyFromEmpty(numElements(x.shape), idx.shape);
    return {TensorDesc{x.dtype, idx.shape}};
  }
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank());
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  nonEmptyFromEmpty(x.shape[static_cast<size_t>(axis)], out);
  return {TensorDesc{x.dtype, out}};
}

std::vector<TensorDesc> broadcastToRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  std::vector<int64_t> target = call.attrs.requireIntList("shape");
  Shape t(target.begin(), target.end());
  Shape b = broadcastShapes(call, x.shape, t);
  if (b.size() != t.size() || !std::equal(b.begin(), b.end(), t.begin(), dimsCompatible))
    call.attrs.fail("shape", shapeToString(t) + " cannot hold an operand of shape " + shapeToString(x.shape));
  return {TensorDesc{x.dtype, t}};
}

std::vector<TensorDesc> tileRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  std::vector<int64_t> reps = call.attrs.requireIntList("reps");
  for (int64_t r : reps)
    if (r < 0) call.attrs.fail("reps", "must not be negative");
  size_t rank = std::max(reps.size(), x.rank());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t d = i < rank - x.rank() ? 1 : x.shape[i - (rank - x.rank())];
    int64_t r = i < rank - reps.size() ? 1 : reps[i - (rank - reps.size())];
    out[i] = d == kAnyDim ? kAnyDim : d * r;
  }
  return {TensorDesc{x.dtype, out}};
}

// TVM's nn.pad (0.8 and later): the data and a 0-d pad value; pad_width gives
// [before, after] per dimension. Only pad_mode="constant" is supported.
std::vector<std::pair<int64_t, int64_t>> padWidths(const AttrReader& attrs, size_t rank) {
  const AttrValue* w = attrs.map().find("pad_width");
  if (!w || w->kind != AttrValue::Kind::List) attrs.fail("pad_width", "is required: [[before, after], ...] per dimension");
  if (w->list.size() != rank)
    attrs.fail("pad_width", "has " + std::to_string(w->list.size()) + " entries for a tensor of rank " + std::to_string(rank));
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const AttrValue& p : w->list) {
    if (p.kind != AttrValue::Kind::List || p.list.size() != 2 || p.list[0].kind != AttrValue::Kind::Int ||
        p.list[1].kind != AttrValue::Kind::Int)
      attrs.fail("pad_width", "entries must be [before, after] pairs of integers");
    int64_t before = p.list[0].i, after = p.list[1].i;
    if (before < 0 || after < 0 || before > kMaxDimension || after > kMaxDimension)
      attrs.fail("pad_width", "entries must be between 0 and 2^40");
    out.emplace_back(before, after);
  }
  return out;
}

std::vector<TensorDesc> padRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireSameDType(call, x, call.inputs[1]);
  requireRank(call, call.inputs[1], 0, "pad value");
  std::string mode = call.attrs.getChoice("pad_mode", {"constant", "edge", "reflect"});
  auto widths = padWidths(call.attrs, x.rank());
  // edge repeats the border element, reflect mirrors the elements inside the border
  // (numpy's reflect): both need data to read, reflect as much as it pads.
  for (size_t d = 0; d < x.rank() && mode != "constant"; ++d) {
    int64_t n = x.shape[d];
    if (n == kAnyDim || (widths[d].first == 0 && widths[d].second == 0)) continue;
    if (n == 0) opFail(call, "pad_mode \"" + mode + "\" cannot pad the empty dimension " + std::to_string(d));
    if (mode == "reflect" && (widths[d].first >= n || widths[d].second >= n))
      opFail(call, "pad_mode \"reflect\" pads dimension " + std::to_string(d) + " of extent " + std::to_string(n) +
                       " by at most " + std::to_string(n - 1) + " on each side");
  }
  Shape out = x.shape;
  for (size_t d = 0; d < out.size(); ++d)
    if (out[d] != kAnyDim) out[d] += widths[d].first + widths[d].second;
  return {TensorDesc{x.dtype, out}};
}

std::vector<TensorDesc> reverseRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  if (!call.attrs.has("axis")) call.attrs.fail("axis", "is required");
  normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank());
  return {x};
}


// ---- compute rules ----
using loop::BinaryOp;
using loop::ExprId;

size_t axisAttr(const ComputeCall& c, const char* name, int64_t dflt, size_t rank) {
  int64_t a = c.attrs.getInt(name, dflt);
  return static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(rank) : a);
}

ExprId lt(const ComputeCall& c, ExprId a, ExprId b) { return c.b.binary(BinaryOp::Lt, a, b); }
ExprId ge(const ComputeCall& c, ExprId a, ExprId b) { return c.b.binary(BinaryOp::Ge, a, b); }
ExprId iconst(const ComputeCall& c, int64_t v) { return c.b.intConst(v); }
ExprId clampIndex(const ComputeCall& c, ExprId v, ExprId extent) {
  // Into [0, extent - 1]; an empty extent gives 0 (element 0 of a buffer is always readable).
  ExprId hi = c.b.binary(BinaryOp::Sub, extent, iconst(c, 1));
  return c.b.binary(BinaryOp::Max, c.b.binary(BinaryOp::Min, v, hi), iconst(c, 0));
}

int32_t reshapeCompute(const ComputeCall& c) { return c.load(0, unflatten(c, 0, flattenOutput(c, c.index))); }

int32_t layoutTransformCompute(const ComputeCall& c) {
  std::vector<size_t> perm = layoutPermutation(c.attrs, c.inputs[0].rank());
  std::vector<ExprId> idx(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) idx[perm[d]] = c.index[d];
  return c.load(0, idx);
}

int32_t transposeCompute(const ComputeCall& c) {
  size_t rank = c.inputs[0].rank();
  std::vector<ExprId> idx(rank);
  auto axes = c.attrs.getIntList("axes");
  for (size_t d = 0; d < rank; ++d) {
    size_t src = axes ? static_cast<size_t>((*axes)[d] < 0 ? (*axes)[d] + static_cast<int64_t>(rank) : (*axes)[d])
                      : rank - 1 - d;
    idx[src] = c.index[d];
  }
  return c.load(0, idx);
}

int32_t expandDimsCompute(const ComputeCall& c) {
  size_t axis = axisAttr(c, "axis", 0, c.inputs[0].rank() + 1);
  size_t num = static_cast<size_t>(c.attrs.getInt("num_newaxis", 1));
  std::vector<ExprId> idx;
  for (size_t d = 0; d < c.index.size(); ++d)
    if (d < axis || d >= axis + num) idx.push_back(c.index[d]);
  return c.load(0, idx);
}

int32_t squeezeCompute(const ComputeCall& c) {
  const TensorDesc& x = c.inputs[0];
  std::vector<bool> drop(x.rank(), false);
  if (auto axes = c.attrs.getIntList("axis")) {
    for (int64_t a : *axes) drop[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(x.rank()) : a)] = true;
  } else {
    for (size_t d = 0; d < x.rank(); ++d) drop[d] = x.shape[d] == 1;
  }
  std::vector<ExprId> idx;
  size_t o = 0;
  for (size_t d = 0; d < x.rank(); ++d) idx.push_back(drop[d] ? iconst(c, 0) : c.index[o++]);
  return c.load(0, idx);
}

int32_t concatenateCompute(const ComputeCall& c) {
  size_t a = axisAttr(c, "axis", 0, c.output.rank());
  ExprId offset = iconst(c, 0), result = -1;
  std::vector<std::pair<ExprId, ExprId>> fields;  // (in range, value)
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    ExprId end = c.b.add(offset, c.inputDim(k, a));
    ExprId ok = c.b.binary(BinaryOp::And, ge(c, c.index[a], offset), lt(c, c.index[a], end));
    std::vector<ExprId> idx(c.index.begin(), c.index.end());
    idx[a] = c.b.binary(BinaryOp::Sub, idx[a], offset);
    fields.emplace_back(ok, c.load(k, guardIndex(c, ok, idx)));
    offset = end;
  }
  result = fields.back().second;
  for (size_t k = fields.size() - 1; k-- > 0;) result = c.b.select(fields[k].first, fields[k].second, result);
  return result;
}

int32_t stackCompute(const ComputeCall& c) {
  size_t a = axisAttr(c, "axis", 0, c.output.rank());
  std::vector<ExprId> idx;
  for (size_t d = 0; d < c.index.size(); ++d)
    if (d != a) idx.push_back(c.index[d]);
  ExprId result = c.load(c.inputs.size() - 1, idx);
  for (size_t k = c.inputs.size() - 1; k-- > 0;)
    result = c.b.select(c.b.binary(BinaryOp::Eq, c.index[a], iconst(c, static_cast<int64_t>(k))), c.load(k, idx), result);
  return result;
}

// One field of split: an offset along the axis (ComputeCall::field says which).
int32_t splitCompute(const ComputeCall& c) {
  size_t a = axisAttr(c, "axis", 0, c.inputs[0].rank());
  const AttrValue* ios = c.attrs.map().find("indices_or_sections");
  ExprId offset;
  if (ios->kind == AttrValue::Kind::Int) {
    ExprId piece = c.b.binary(BinaryOp::Div, c.inputDim(0, a), iconst(c, ios->i));
    offset = c.b.mul(iconst(c, c.field), piece);
  } else {
    std::vector<int64_t> idx = *c.attrs.getIntList("indices_or_sections");
    offset = iconst(c, c.field == 0 ? 0 : idx[static_cast<size_t>(c.field - 1)]);
  }
  std::vector<ExprId> in(c.index.begin(), c.index.end());
  in[a] = c.b.add(in[a], offset);
  return c.load(0, in);
}

int32_t stridedSliceCompute(const ComputeCall& c) {
  const TensorDesc& x = c.inputs[0];
  std::vector<int64_t> begin = c.attrs.requireIntList("begin");
  std::vector<int64_t> strides = c.attrs.getIntList("strides").value_or(std::vector<int64_t>{});
  std::vector<int64_t> axes;
  if (auto a = c.attrs.getIntList("axes")) {
    for (int64_t v : *a) axes.push_back(v < 0 ? v + static_cast<int64_t>(x.rank()) : v);
  } else {
    for (size_t i = 0; i < begin.size() && i < x.rank(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  std::vector<ExprId> idx(c.index.begin(), c.index.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    size_t ax = static_cast<size_t>(axes[k]);
    int64_t stride = strides.empty() ? 1 : (k < strides.size() ? strides[k] : strides.back());
    if (c.attrs.getString("slice_mode", "end") == "size") stride = 1;
    ExprId dim = c.inputDim(0, ax);
    int64_t b = k < begin.size() ? begin[k] : 0;
    // TVM's normalization: a negative begin counts from the end, then clamps.
    ExprId start = b < 0 ? c.b.add(dim, iconst(c, b)) : iconst(c, b);
    ExprId lo = iconst(c, stride > 0 ? 0 : -1);
    ExprId hi = stride > 0 ? dim : c.b.binary(BinaryOp::Sub, dim, iconst(c, 1));
    start = c.b.binary(BinaryOp::Max, c.b.binary(BinaryOp::Min, start, hi), lo);
    idx[ax] = c.b.add(start, c.b.mul(c.index[ax], iconst(c, stride)));
  }
  return c.load(0, idx);
}

int32_t takeCompute(const ComputeCall& c) {
  const TensorDesc& x = c.inputs[0];
  size_t idxRank = c.inputs[1].rank();
  bool wrap = c.attrs.getString("mode", "clip") == "wrap";
  auto fix = [&](ExprId v, ExprId extent) {
    if (!wrap) return clampIndex(c, v, extent);
    // Python-style wrap; an empty extent reads element 0.
    ExprId safe = c.b.binary(BinaryOp::Max, extent, iconst(c, 1));
    return c.b.binary(BinaryOp::FloorMod, v, safe);
  };
  if (!c.attrs.has("axis")) {
    ExprId v = c.b.cast(DType::Int64, c.load(1, c.index));
    return c.load(0, unflatten(c, 0, fix(v, operandSize(c, 0))));
  }
  size_t a = axisAttr(c, "axis", 0, x.rank());
  std::vector<ExprId> pos(c.index.begin() + static_cast<long>(a), c.index.begin() + static_cast<long>(a + idxRank));
  ExprId v = c.b.cast(DType::Int64, c.load(1, pos));
  std::vector<ExprId> idx(c.index.begin(), c.index.begin() + static_cast<long>(a));
  idx.push_back(fix(v, c.inputDim(0, a)));
  idx.insert(idx.end(), c.index.begin() + static_cast<long>(a + idxRank), c.index.end());
  return c.load(0, idx);
}

int32_t gatherCompute(const ComputeCall& c) {
  size_t a = axisAttr(c, "axis", 0, c.inputs[0].rank());
  // Negative indices count from the end; out-of-range ones wrap (the read stays inside).
  ExprId extent = c.b.binary(BinaryOp::Max, c.inputDim(0, a), iconst(c, 1));
  std::vector<ExprId> idx(c.index.begin(), c.index.end());
  idx[a] = c.b.binary(BinaryOp::FloorMod, c.b.cast(DType::Int64, c.load(1, c.index)), extent);
  return c.load(0, idx);
}

int32_t broadcastToCompute(const ComputeCall& c) { return c.load(0, broadcastIndex(c, 0)); }

int32_t tileCompute(const ComputeCall& c) {
  size_t inRank = c.inputs[0].rank(), outRank = c.output.rank();
  std::vector<ExprId> idx(inRank);
  for (size_t d = 0; d < inRank; ++d)
    idx[d] = c.b.binary(BinaryOp::Mod, c.index[d + (outRank - inRank)], c.b.binary(BinaryOp::Max, c.inputDim(0, d), iconst(c, 1)));
  return c.load(0, idx);
}

int32_t padCompute(const ComputeCall& c) {
  auto widths = padWidths(c.attrs, c.inputs[0].rank());
  std::vector<ExprId> in(c.index.begin(), c.index.end());
  std::string mode = c.attrs.getString("pad_mode", "constant");
  if (mode != "constant") {
    // The shape rule keeps padded extents non-empty (and, for reflect, larger than
    // the pad), so every index below lands inside the data.
    for (size_t d = 0; d < in.size(); ++d) {
      if (widths[d].first == 0 && widths[d].second == 0) continue;
      ExprId i = c.b.binary(BinaryOp::Sub, in[d], iconst(c, widths[d].first));
      ExprId last = c.b.binary(BinaryOp::Sub, c.inputDim(0, d), iconst(c, 1));
      if (mode == "edge") {
        in[d] = c.b.binary(BinaryOp::Min, c.b.binary(BinaryOp::Max, i, iconst(c, 0)), last);
      } else {
        // |i| mirrors at 0; last - |last - j| mirrors at the last element.
        ExprId j = c.b.unary(loop::UnaryOp::Abs, i);
        in[d] = c.b.binary(BinaryOp::Sub, last, c.b.unary(loop::UnaryOp::Abs, c.b.binary(BinaryOp::Sub, last, j)));
      }
    }
    return c.load(0, in);
  }
  ExprId ok = c.b.constant(1, DType::Bool);
  for (size_t d = 0; d < in.size(); ++d) {
    in[d] = c.b.binary(BinaryOp::Sub, in[d], iconst(c, widths[d].first));
    ExprId inside = c.b.binary(BinaryOp::And, c.b.binary(BinaryOp::Ge, in[d], iconst(c, 0)),
                               c.b.binary(BinaryOp::Lt, in[d], c.inputDim(0, d)));
    ok = c.b.binary(BinaryOp::And, ok, inside);
  }
  // Outside the data, the read is redirected to element 0 (every buffer has at
  // least one line) and its value replaced by the pad value.
  return c.b.select(ok, c.load(0, guardIndex(c, ok, in)), c.load(1, {}));
}

int32_t reverseCompute(const ComputeCall& c) {
  size_t a = axisAttr(c, "axis", 0, c.inputs[0].rank());
  std::vector<ExprId> idx(c.index.begin(), c.index.end());
  idx[a] = c.b.binary(BinaryOp::Sub, c.b.binary(BinaryOp::Sub, c.inputDim(0, a), iconst(c, 1)), idx[a]);
  return c.load(0, idx);
}

}  // namespace

void registerTransformOps(OpTable& t) {
  t.add("reshape", 1, OpPattern::Injective, reshapeRule, {"newshape", "allowzero"}).compute = reshapeCompute;
  t.add("transpose", 1, OpPattern::Injective, transposeRule, {"axes"}).compute = transposeCompute;
  t.add("layout_transform", 1, OpPattern::Injective, layoutTransformRule, {"src_layout", "dst_layout"}).compute =
      layoutTransformCompute;
  t.add("expand_dims", 1, OpPattern::Broadcast, expandDimsRule, {"axis", "num_newaxis"}).compute = expandDimsCompute;
  t.add("squeeze", 1, OpPattern::Injective, squeezeRule, {"axis"}).compute = squeezeCompute;
  OpDef& concat = t.add("concatenate", 1, OpPattern::Injective, concatenateRule, {"axis"});
  concat.tupleInput = true;
  concat.compute = concatenateCompute;
  OpDef& stack = t.add("stack", 1, OpPattern::Injective, stackRule, {"axis"});
  stack.tupleInput = true;
  stack.compute = stackCompute;
  OpDef& split = t.add("split", 1, OpPattern::Injective, splitRule, {"indices_or_sections", "axis"});
  split.tupleOutput = true;
  split.compute = splitCompute;
  t.add("strided_slice", 1, OpPattern::Injective, stridedSliceRule, {"begin", "end", "strides", "axes", "slice_mode"})
      .compute = stridedSliceCompute;
  t.add("gather", 2, OpPattern::Injective, gatherRule, {"axis"}).compute = gatherCompute;
  t.add("take", 2, OpPattern::Injective, takeRule, {"axis", "mode", "batch_dims"}).compute = takeCompute;
  t.add("broadcast_to", 1, OpPattern::Broadcast, broadcastToRule, {"shape"}).compute = broadcastToCompute;
  t.add("tile", 1, OpPattern::Injective, tileRule, {"reps"}).compute = tileCompute;
  t.add("reverse", 1, OpPattern::Injective, reverseRule, {"axis"}).compute = reverseCompute;
  t.add("nn.pad", 2, OpPattern::Injective, padRule, {"pad_width", "pad_mode"}).compute = padCompute;
}

}  // namespace kiln::ops
