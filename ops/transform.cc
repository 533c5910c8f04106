// Shape and data-movement operators: reshape, transpose, expand_dims, squeeze,
// concatenate, stack, split, strided_slice, take, broadcast_to, tile, reverse.
#include <algorithm>
#include <limits>

#include "ops/shape_util.h"

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

std::vector<TensorDesc> takeRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  const TensorDesc& idx = call.inputs[1];
  requireDType(call, idx, DTypeClass::Int, "indices");
  call.attrs.getChoice("mode", {"clip", "wrap", "fast"});
  if (call.attrs.getInt("batch_dims", 0) != 0) call.attrs.fail("batch_dims", "other than 0 is not supported");
  if (!call.attrs.has("axis")) return {TensorDesc{x.dtype, idx.shape}};
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank());
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
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

std::vector<TensorDesc> reverseRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  if (!call.attrs.has("axis")) call.attrs.fail("axis", "is required");
  normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank());
  return {x};
}

}  // namespace

void registerTransformOps(OpTable& t) {
  t.add("reshape", 1, OpPattern::Injective, reshapeRule, {"newshape", "allowzero"});
  t.add("transpose", 1, OpPattern::Injective, transposeRule, {"axes"});
  t.add("expand_dims", 1, OpPattern::Broadcast, expandDimsRule, {"axis", "num_newaxis"});
  t.add("squeeze", 1, OpPattern::Injective, squeezeRule, {"axis"});
  t.add("concatenate", 1, OpPattern::Injective, concatenateRule, {"axis"}).tupleInput = true;
  t.add("stack", 1, OpPattern::Injective, stackRule, {"axis"}).tupleInput = true;
  t.add("split", 1, OpPattern::Injective, splitRule, {"indices_or_sections", "axis"}).tupleOutput = true;
  t.add("strided_slice", 1, OpPattern::Injective, stridedSliceRule, {"begin", "end", "strides", "axes", "slice_mode"});
  t.add("take", 2, OpPattern::Injective, takeRule, {"axis", "mode", "batch_dims"});
  t.add("broadcast_to", 1, OpPattern::Broadcast, broadcastToRule, {"shape"});
  t.add("tile", 1, OpPattern::Injective, tileRule, {"reps"});
  t.add("reverse", 1, OpPattern::Injective, reverseRule, {"axis"});
}

}  // namespace kiln::ops
