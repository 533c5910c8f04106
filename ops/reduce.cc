// Reductions (sum, mean, max, min, prod, all, any, argmax, argmin) and cumsum.
#include <algorithm>

#include "ops/shape_util.h"

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

}  // namespace

void registerReduceOps(OpTable& t) {
  for (const char* name : {"sum", "mean", "max", "min", "prod"})
    t.add(name, 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, false>, {"axis", "keepdims", "exclude"});
  for (const char* name : {"all", "any"})
    t.add(name, 1, OpPattern::CommReduce, reduceRule<DTypeClass::Bool, false>, {"axis", "keepdims", "exclude"});
  for (const char* name : {"argmax", "argmin"})
    t.add(name, 1, OpPattern::CommReduce, reduceRule<DTypeClass::Numeric, true>,
          {"axis", "keepdims", "exclude", "select_last_index"});
  t.add("cumsum", 1, OpPattern::Opaque, cumsumRule, {"axis", "dtype", "exclusive"});
}

}  // namespace kiln::ops
