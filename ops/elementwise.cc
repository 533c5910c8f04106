// Element-wise operators: unary math, binary arithmetic and comparison with numpy
// broadcasting, where, clip, leaky_relu, fixed_point_multiply and cast.
#include <cmath>

#include "kernel_ir/compute.h"
#include "ops/registry.h"
#include "kernel_ir/shape_util.h"

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

// TVM's nn.leaky_relu: alpha (default 0.01) scales the negative part.
std::vector<TensorDesc> leakyReluRule(const OpCall& call) {
  requireDType(call, call.inputs[0], DTypeClass::Float, "operand");
  (void)call.attrs.getFloat("alpha", 0.01);
  return {call.inputs[0]};
}

// TVM's fixed_point_multiply: int32 x times a Q31 multiplier, scaled by 2^shift,
// rounded to nearest (ties up), as in TVM's topi (int64 arithmetic throughout).
std::vector<TensorDesc> fixedPointMultiplyRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  if (x.dtype != DType::Int32) opFail(call, "the operand must be int32, not " + std::string(dtypeName(x.dtype)));
  int64_t m = call.attrs.getInt("multiplier", -1);
  if (!call.attrs.has("multiplier") || m < 0 || m > INT32_MAX) call.attrs.fail("multiplier", "must be an integer in [0, 2^31)");
  int64_t shift = call.attrs.getInt("shift", 0);
  if (shift < -31 || shift > 31) call.attrs.fail("shift", "must be between -31 and 31");
  return {x};
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


// ---- compute rules ----
using loop::BinaryOp;
using loop::ExprId;
using loop::UnaryOp;

ExprId operand(const ComputeCall& c, size_t k) { return c.load(k, broadcastIndex(c, k)); }

template <UnaryOp Op>
int32_t unaryCompute(const ComputeCall& c) {
  ExprId x = operand(c, 0);
  DType t = c.b.typeOf(x);
  // Rounding an integer is the identity.
  if ((Op == UnaryOp::Floor || Op == UnaryOp::Ceil || Op == UnaryOp::Round) && !isFloat(t)) return x;
  if (Op == UnaryOp::Abs && isUnsignedInt(t)) return x;
  return c.b.unary(Op, x);
}

int32_t reluCompute(const ComputeCall& c) {
  ExprId x = operand(c, 0);
  return c.b.binary(BinaryOp::Max, x, c.b.constant(0, c.b.typeOf(x)));
}

int32_t copyCompute(const ComputeCall& c) { return operand(c, 0); }

int32_t leakyReluCompute(const ComputeCall& c) {
  ExprId x = operand(c, 0);
  DType t = c.b.typeOf(x);
  ExprId scaled = c.b.binary(BinaryOp::Mul, x, c.b.constant(c.attrs.getFloat("alpha", 0.01), t));
  return c.b.select(c.b.binary(BinaryOp::Gt, x, c.b.constant(0, t)), x, scaled);
}

int32_t clipCompute(const ComputeCall& c) {
  ExprId x = operand(c, 0);
  DType t = c.b.typeOf(x);
  double lo = c.attrs.getFloat("a_min", 0), hi = c.attrs.getFloat("a_max", 0);
  if (!isFloat(t)) {
    lo = std::ceil(lo);
    hi = std::floor(hi);
  }
  return c.b.binary(BinaryOp::Min, c.b.binary(BinaryOp::Max, x, c.b.constant(lo, t)), c.b.constant(hi, t));
}

int32_t fixedPointMultiplyCompute(const ComputeCall& c) {
  int64_t multiplier = c.attrs.getInt("multiplier", 0), shift = c.attrs.getInt("shift", 0);
  ExprId x = c.b.cast(DType::Int64, operand(c, 0));
  auto i64 = [&](int64_t v) { return c.b.constant(static_cast<double>(v), DType::Int64); };
  if (shift > 0) x = c.b.binary(BinaryOp::Mul, x, i64(int64_t(1) << shift));
  int64_t right = 31 + (shift > 0 ? 0 : -shift);
  x = c.b.binary(BinaryOp::Add, c.b.binary(BinaryOp::Mul, x, i64(multiplier)), i64(int64_t(1) << (right - 1)));
  // An arithmetic right shift is a floor division by a power of two.
  x = c.b.binary(BinaryOp::FloorDiv, x, i64(int64_t(1) << right));
  return c.b.cast(DType::Int32, x);
}

int32_t castCompute(const ComputeCall& c) { return c.b.cast(c.output.dtype, operand(c, 0)); }

template <BinaryOp Op>
int32_t binaryCompute(const ComputeCall& c) {
  return c.b.binary(Op, operand(c, 0), operand(c, 1));
}

int32_t whereCompute(const ComputeCall& c) {
  return c.b.select(operand(c, 0), operand(c, 1), operand(c, 2));
}

}  // namespace

void registerElementwiseOps(OpTable& t) {
  struct Unary {
    const char* name;
    ShapeRule rule;
    ComputeRule compute;
  };
  const Unary unary[] = {
      {"exp", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Exp>},
      {"log", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Log>},
      {"sqrt", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Sqrt>},
      {"rsqrt", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Rsqrt>},
      {"tanh", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Tanh>},
      {"sigmoid", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Sigmoid>},
      {"erf", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Erf>},
      {"sin", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Sin>},
      {"cos", unaryRule<DTypeClass::Float>, unaryCompute<UnaryOp::Cos>},
      {"negative", unaryRule<DTypeClass::Numeric>, unaryCompute<UnaryOp::Neg>},
      {"abs", unaryRule<DTypeClass::Numeric>, unaryCompute<UnaryOp::Abs>},
      {"nn.relu", unaryRule<DTypeClass::Numeric>, reluCompute},
      {"floor", unaryRule<DTypeClass::Numeric>, unaryCompute<UnaryOp::Floor>},
      {"ceil", unaryRule<DTypeClass::Numeric>, unaryCompute<UnaryOp::Ceil>},
      {"round", unaryRule<DTypeClass::Numeric>, unaryCompute<UnaryOp::Round>},
      {"logical_not", unaryRule<DTypeClass::Bool>, unaryCompute<UnaryOp::Not>},
      {"copy", unaryRule<DTypeClass::Any>, copyCompute},
  };
  for (const Unary& u : unary) t.add(u.name, 1, OpPattern::ElemWise, u.rule).compute = u.compute;
  t.add("clip", 1, OpPattern::ElemWise, clipRule, {"a_min", "a_max"}).compute = clipCompute;
  t.add("nn.leaky_relu", 1, OpPattern::ElemWise, leakyReluRule, {"alpha"}).compute = leakyReluCompute;
  t.add("fixed_point_multiply", 1, OpPattern::ElemWise, fixedPointMultiplyRule, {"multiplier", "shift"}).compute =
      fixedPointMultiplyCompute;
  t.add("cast", 1, OpPattern::ElemWise, castRule, {"dtype"}).compute = castCompute;

  struct Binary {
    const char* name;
    ShapeRule rule;
    ComputeRule compute;
  };
  const Binary binary[] = {
      {"add", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Add>},
      {"subtract", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Sub>},
      {"multiply", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Mul>},
      {"divide", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Div>},
      {"power", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Pow>},
      {"maximum", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Max>},
      {"minimum", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Min>},
      {"floor_divide", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::FloorDiv>},
      {"mod", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::Mod>},
      {"floor_mod", binaryRule<BinaryKind::Arith>, binaryCompute<BinaryOp::FloorMod>},
      {"equal", binaryRule<BinaryKind::Compare>, binaryCompute<BinaryOp::Eq>},
      {"not_equal", binaryRule<BinaryKind::Compare>, binaryCompute<BinaryOp::Ne>},
      {"less", binaryRule<BinaryKind::Compare>, binaryCompute<BinaryOp::Lt>},
      {"less_equal", binaryRule<BinaryKind::Compare>, binaryCompute<BinaryOp::Le>},
      {"greater", binaryRule<BinaryKind::Compare>, binaryCompute<BinaryOp::Gt>},
      {"greater_equal", binaryRule<BinaryKind::Compare>, binaryCompute<BinaryOp::Ge>},
      {"logical_and", binaryRule<BinaryKind::Logical>, binaryCompute<BinaryOp::And>},
      {"logical_or", binaryRule<BinaryKind::Logical>, binaryCompute<BinaryOp::Or>},
  };
  for (const Binary& op : binary) t.add(op.name, 2, OpPattern::Broadcast, op.rule).compute = op.compute;
  t.add("where", 3, OpPattern::Broadcast, whereRule).compute = whereCompute;
}

}  // namespace kiln::ops
