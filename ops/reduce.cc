// Reductions (sum, mean, max, min, prod, all, any, argmax, argmin), cumsum, and
// TVM's collapse_sum_like / collapse_sum_to (the sum that undoes a broadcast).
#include <algorithm>

#include "kernel_ir/compute.h"
#include "ops/registry.h"
#include "kernel_ir/shape_util.h"

namespace kiln::ops {
namespace {

// The reduced axes, sorted and unique, after `axis=None` and `exclude` are applied.
std::vector<bool> reducedAxes(const OpCall& call, size_t rank) {
  std::vector<bool> reduced(rank, false);
  auto axes = call.attrs.getIntList("axis");
  bool exclude = call.attrs.getBool("exclude", false);
  if (!axes) {
    std::fill(reduced.begin(), reduced.end(), !exclude);
    return reduced;
  }
  for (int64_t a : *axes) {
    int64_t n = normalizeAxis(call, a, rank);
    if (reduced[n]) opFail(call, "axis " + std::to_string(a) + " is listed twice");
    reduced[n] = true;
  }
  if (exclude) reduced.flip();
  return reduced;
}

template <DTypeClass Cls, bool ArgReduce>
std::vector<TensorDesc> reduceRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireDType(call, x, Cls, "operand");
  std::vector<bool> reduced = reducedAxes(call, x.rank());
  bool keepdims = call.attrs.getBool("keepdims", false);
  // The reduction keeps the first extreme it meets; the last one is not computed.
  if (ArgReduce && call.attrs.getBool("select_last_index", false)) call.attrs.fail("select_last_index", "True is not supported");
  TensorDesc out{ArgReduce ? DType::Int32 : x.dtype, {}};
  for (size_t i = 0; i < x.rank(); ++i) {
    if (!reduced[i]) out.shape.push_back(x.shape[i]);
    else if (keepdims) out.shape.push_back(1);
  }
  return {out};
}

std::vector<TensorDesc> cumsumRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireDType(call, x, DTypeClass::Numeric, "operand");
  call.attrs.getBool("exclusive", false);
  DType dt = call.attrs.getDType("dtype").value_or(x.dtype);
  if (!call.attrs.has("axis")) return {TensorDesc{dt, {numElements(x.shape)}}};
  normalizeAxis(call, call.attrs.getInt("axis", 0), x.rank());
  return {TensorDesc{dt, x.shape}};
}

// collapse_sum_like(data, like) and collapse_sum_to(data, shape=...): data summed
// down to a shape it was broadcast from (TVM's gradient of a broadcast). The
// target's dimensions align with data's from the right; a target dimension of 1
// sums data's, any other must equal data's, and data's leading dimensions beyond
// the target's rank are summed away.
TensorDesc collapseTarget(const OpCall& call, const TensorDesc& x, const Shape& target) {
  requireDType(call, x, DTypeClass::Numeric, "operand");
  if (target.size() > x.rank())
    opFail(call, "cannot collapse a tensor of shape " + shapeToString(x.shape) + " to the higher-rank shape " + shapeToString(target));
  size_t lead = x.rank() - target.size();
  for (size_t d = 0; d < target.size(); ++d) {
    int64_t want = target[d], have = x.shape[lead + d];
    if (want != 1 && want != kAnyDim && have != kAnyDim && want != have)
      opFail(call, "cannot collapse a tensor of shape " + shapeToString(x.shape) + " to shape " + shapeToString(target));
  }
  return TensorDesc{x.dtype, target};
}

std::vector<TensorDesc> collapseSumLikeRule(const OpCall& call) {
  return {collapseTarget(call, call.inputs[0], call.inputs[1].shape)};
}

std::vector<TensorDesc> collapseSumToRule(const OpCall& call) {
  std::vector<int64_t> s = call.attrs.requireIntList("shape");
  for (int64_t d : s)
    if (d < 0) call.attrs.fail("shape", "dimensions must be non-negative");
  return {collapseTarget(call, call.inputs[0], Shape(s.begin(), s.end()))};
}

// ---- compute rules ----
using loop::ExprId;

// The reduced axes, as the shape rule decided them (the attributes were checked then).
std::vector<bool> axesToReduce(const AttrReader& attrs, size_t rank) {
  std::vector<bool> reduced(rank, false);
  auto axes = attrs.getIntList("axis");
  bool exclude = attrs.getBool("exclude", false);
  if (!axes) {
    std::fill(reduced.begin(), reduced.end(), !exclude);
    return reduced;
  }
  for (int64_t a : *axes) reduced[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(rank) : a)] = true;
  if (exclude) reduced.flip();
  return reduced;
}

template <loop::ReduceOp Op, bool Mean>
int32_t reduceCompute(const ComputeCall& c) {
  size_t rank = c.inputs[0].rank();
  std::vector<bool> reduced = axesToReduce(c.attrs, rank);
  bool keepdims = c.attrs.getBool("keepdims", false);
  std::vector<ExprId> idx(rank);
  std::vector<int32_t> vars;
  std::vector<ExprId> extents;
  size_t out = 0;
  for (size_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      int32_t v = c.b.newVar();
      vars.push_back(v);
      extents.push_back(c.inputDim(0, d));
      idx[d] = c.b.var(v);
      if (keepdims) ++out;
    } else {
      idx[d] = c.index[out++];
    }
  }
  // Reduced axes that end the shape, all static, are one variable over their
  // product (a global pooling's H x W): the row-major index of that variable
  // split over them adds back up to the variable (LoopBuilder::add), so the
  // reduction is one contiguous run, vectorized with one horizontal step per
  // result instead of one per row. Arg-reductions keep their axes.
  if (Op != loop::ReduceOp::ArgMax && Op != loop::ReduceOp::ArgMin && vars.size() > 1) {
    size_t first = rank;
    int64_t count = 1, next;
    while (first > 0 && reduced[first - 1] && c.inputs[0].shape[first - 1] != kAnyDim &&
           !__builtin_mul_overflow(count, c.inputs[0].shape[first - 1], &next)) {
      count = next;
      --first;
    }
    if (rank - first > 1) {
      size_t keep = vars.size() - (rank - first);
      vars.resize(keep);
      extents.resize(keep);
      int32_t v = c.b.newVar();
      vars.push_back(v);
      extents.push_back(c.b.intConst(count));
      // Split from the last axis up: idx = rest % E, rest = rest / E.
      ExprId rest = c.b.var(v);
      for (size_t d = rank; d-- > first;) {
        ExprId e = c.b.intConst(c.inputs[0].shape[d]);
        idx[d] = d == first ? rest : c.b.binary(loop::BinaryOp::Mod, rest, e);
        if (d != first) rest = c.b.binary(loop::BinaryOp::Div, rest, e);
      }
    }
  }
  ExprId body = c.load(0, idx);
  if (vars.empty()) return body;
  // Integer sums and products accumulate in int64 (a mean of uint8 must not wrap);
  // the result is cast back to the operand's dtype.
  DType t = c.b.typeOf(body);
  bool widen = isInt(t) && (Op == loop::ReduceOp::Sum || Op == loop::ReduceOp::Prod);
  if (widen) body = c.b.cast(DType::Int64, body);
  ExprId r = c.b.reduce(Op, vars, extents, body);
  if (Op == loop::ReduceOp::ArgMax || Op == loop::ReduceOp::ArgMin) return c.b.cast(DType::Int32, r);
  if (Mean) {
    ExprId count = c.b.intConst(1);
    for (ExprId e : extents) count = c.b.mul(count, e);
    r = c.b.binary(loop::BinaryOp::Div, r, c.b.cast(c.b.typeOf(r), count));
  }
  return widen ? c.b.cast(t, r) : r;
}

// One output element sums data over its leading dimensions and over every aligned
// dimension where the target's extent is 1. A target extent known only at run time
// decides then: the reduction runs over data's extent when it is 1 and over a single
// element otherwise, and data's index is the output index plus the reduction
// variable (one of the two is always 0), so no read leaves data.
int32_t collapseSumCompute(const ComputeCall& c) {
  size_t rank = c.inputs[0].rank(), outRank = c.output.rank(), lead = rank - outRank;
  std::vector<ExprId> idx(rank), extents;
  std::vector<int32_t> vars;
  for (size_t d = 0; d < rank; ++d) {
    bool leading = d < lead;
    int64_t want = leading ? 1 : c.output.shape[d - lead];
    if (!leading && want != 1 && want != kAnyDim) {
      idx[d] = c.index[d - lead];
      continue;
    }
    int32_t v = c.b.newVar();
    vars.push_back(v);
    if (want == kAnyDim) {
      ExprId one = c.b.intConst(1);
      ExprId collapsed = c.b.binary(loop::BinaryOp::Eq, c.outputDim(d - lead), one);
      extents.push_back(c.b.select(collapsed, c.inputDim(0, d), one));
      idx[d] = c.b.add(c.index[d - lead], c.b.var(v));
    } else {
      extents.push_back(c.inputDim(0, d));
      idx[d] = c.b.var(v);
    }
  }
  ExprId body = c.load(0, idx);
  if (vars.empty()) return body;
  DType t = c.b.typeOf(body);
  if (isInt(t)) body = c.b.cast(DType::Int64, body);
  ExprId r = c.b.reduce(loop::ReduceOp::Sum, vars, extents, body);
  return isInt(t) ? c.b.cast(t, r) : r;
}

int32_t cumsumCompute(const ComputeCall& c) {
  bool exclusive = c.attrs.getBool("exclusive", false);
  DType dt = c.output.dtype;
  int32_t v = c.b.newVar();
  ExprId k = c.b.var(v);
  ExprId extent, body;
  if (!c.attrs.has("axis")) {
    // Over the flattened operand.
    extent = exclusive ? c.index[0] : c.b.add(c.index[0], c.b.intConst(1));
    body = c.load(0, unflatten(c, 0, k));
  } else {
    int64_t axis = c.attrs.getInt("axis", 0);
    size_t a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(c.inputs[0].rank()) : axis);
    std::vector<ExprId> idx(c.index.begin(), c.index.end());
    extent = exclusive ? idx[a] : c.b.add(idx[a], c.b.intConst(1));
    idx[a] = k;
    body = c.load(0, idx);
  }
  return c.b.reduce(loop::ReduceOp::Sum, {v}, {extent}, c.b.cast(dt, body));
}

}  // namespace

void registerReduceOps(OpTable& t) {
  const std::initializer_list<const char*> attrs = {"axis", "keepdims", "exclude"};
  t.add("sum", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, false>, attrs).compute =
      reduceCompute<loop::ReduceOp::Sum, false>;
  t.add("mean", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, false>, attrs).compute =
      reduceCompute<loop::ReduceOp::Sum, true>;
  t.add("max", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, false>, attrs).compute =
      reduceCompute<loop::ReduceOp::Max, false>;
  t.add("min", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, false>, attrs).compute =
      reduceCompute<loop::ReduceOp::Min, false>;
  t.add("prod", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, false>, attrs).compute =
      reduceCompute<loop::ReduceOp::Prod, false>;
  t.add("all", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Bool, false>, attrs).compute =
      reduceCompute<loop::ReduceOp::All, false>;
  t.add("any", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Bool, false>, attrs).compute =
      reduceCompute<loop::ReduceOp::Any, false>;
  const std::initializer_list<const char*> argAttrs = {"axis", "keepdims", "exclude", "select_last_index"};
  t.add("argmax", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, true>, argAttrs).compute =
      reduceCompute<loop::ReduceOp::ArgMax, false>;
  t.add("argmin", 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, true>, argAttrs).compute =
      reduceCompute<loop::ReduceOp::ArgMin, false>;
  t.add("cumsum", 1, OpPattern::Opaque, cumsumRule, {"axis", "dtype", "exclusive"}).compute = cumsumCompute;
  t.add("collapse_sum_like", 2, OpPattern::CommReduce, collapseSumLikeRule).compute = collapseSumCompute;
  t.add("collapse_sum_to", 1, OpPattern::CommReduce, collapseSumToRule, {"shape"}).compute = collapseSumCompute;
}

}  // namespace kiln::ops
