// Element-wise operators: unary math, binary arithmetic and comparison with numpy
// broadcasting, where, clip and cast.
#include "ops/shape_util.h"

namespace kiln::ops {
namespace {

template <DTypeClass Cls>
std::vector<TensorDesc> unaryRule(const OpCall& call) {
  requireDType(call, call.inputs[0], Cls, "operand");
  return {call.inputs[0]};
}

std::vector<TensorDesc> clipRule(const OpCall& call) {
  requireDType(call, call.inputs[0], DTypeClass::Numeric, "operand");
  if (!call.attrs.has("a_min")) call.attrs.fail("a_min", "is required");
  if (!call.attrs.has("a_max")) call.attrs.fail("a_max", "is required");
  double lo = call.attrs.getFloat("a_min", 0), hi = call.attrs.getFloat("a_max", 0);
  if (lo > hi) opFail(call, "a_min must not exceed a_max");
  return {call.inputs[0]};
}

std::vector<TensorDesc> castRule(const OpCall& call) {
  auto t = call.attrs.getDType("dtype");
  if (!t) call.attrs.fail("dtype", "is required");
  return {TensorDesc{*t, call.inputs[0].shape}};
}

enum class BinaryKind { Arith, Compare, Logical };

template <BinaryKind Kind>
std::vector<TensorDesc> binaryRule(const OpCall& call) {
  const TensorDesc& a = call.inputs[0];
  const TensorDesc& b = call.inputs[1];
  requireSameDType(call, a, b);
  if (Kind == BinaryKind::Arith) requireDType(call, a, DTypeClass::Numeric, "operand");
  if (Kind == BinaryKind::Logical) requireDType(call, a, DTypeClass::Bool, "operand");
  Shape s = broadcastShapes(call, a.shape, b.shape);
  return {TensorDesc{Kind == BinaryKind::Arith ? a.dtype : DType::Bool, s}};
}

std::vector<TensorDesc> whereRule(const OpCall& call) {
  const TensorDesc& c = call.inputs[0];
  requireDType(call, c, DTypeClass::Bool, "condition");
  requireSameDType(call, call.inputs[1], call.inputs[2]);
  Shape s = broadcastShapes(call, broadcastShapes(call, c.shape, call.inputs[1].shape), call.inputs[2].shape);
  return {TensorDesc{call.inputs[1].dtype, s}};
}

}  // namespace

void registerElementwiseOps(OpTable& t) {
  for (const char* name : {"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos"})
    t.add(name, 1, OpPattern::ElemWise, unaryRule<DTypeClass::Float>);
  for (const char* name : {"negative", "abs", "nn.relu", "floor", "ceil", "round"})
    t.add(name, 1, OpPattern::ElemWise, unaryRule<DTypeClass::Numeric>);
  t.add("logical_not", 1, OpPattern::ElemWise, unaryRule<DTypeClass::Bool>);
  t.add("copy", 1, OpPattern::ElemWise, unaryRule<DTypeClass::Any>);
  t.add("clip", 1, OpPattern::ElemWise, clipRule, {"a_min", "a_max"});
  t.add("cast", 1, OpPattern::ElemWise, castRule, {"dtype"});

  for (const char* name : {"add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "floor_divide",
                           "mod", "floor_mod"})
    t.add(name, 2, OpPattern::Broadcast, binaryRule<BinaryKind::Arith>);
  for (const char* name : {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
    t.add(name, 2, OpPattern::Broadcast, binaryRule<BinaryKind::Compare>);
  for (const char* name : {"logical_and", "logical_or"})
    t.add(name, 2, OpPattern::Broadcast, binaryRule<BinaryKind::Logical>);
  t.add("where", 3, OpPattern::Broadcast, whereRule);
}

}  // namespace kiln::ops
