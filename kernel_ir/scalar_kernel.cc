// Interprets the loop IR of a scalar kernel on register scalars.
#include "kernel_ir/scalar_kernel.h"

#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>

#include "kernel_ir/lower.h"
#include "kiln/error.h"
#include "kiln/half.h"

namespace kiln::kernel_ir {

using loop::BinaryOp;
using loop::ExprKind;
using loop::UnaryOp;

namespace {

// Trivially constructible: the evaluator's value array is not zeroed per call.
struct Num {
  int64_t i;
  double f;
};

double roundFloat(DType t, double v) {
  if (t == DType::Float32) return static_cast<float>(v);
  if (t == DType::Float16) return halfToFloat(floatToHalf(static_cast<float>(v)));
  return v;
}

int64_t saturate(DType t, double v) {
  if (std::isnan(v)) return 0;
  double lo, hi;
  switch (t) {
    case DType::Int8: lo = -128, hi = 127; break;
    case DType::Int16: lo = -32768, hi = 32767; break;
    case DType::Int32: lo = -2147483648.0, hi = 2147483647.0; break;
    case DType::UInt8: lo = 0, hi = 255; break;
    case DType::UInt16: lo = 0, hi = 65535; break;
    case DType::Bool: return v != 0;
    default:
      if (v >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
      if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(v);
  }
  return static_cast<int64_t>(std::clamp(v, lo, hi));
}

// Integer power as the kernels compute it (codegen/loop_emitter.h, intPower):
// exact, saturated to t's range; a negative exponent truncates 1/x^|y| toward
// zero, and 0^-n saturates high as +inf does.
int64_t intPower(DType t, int64_t x, int64_t y) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (y < 0) return x == 1 ? 1 : x == -1 ? (y % 2 != 0 ? -1 : 1) : x == 0 ? saturate(t, inf) : 0;
  bool negative = x < 0 && (y & 1) != 0;
  int64_t result = 1, base = x;
  bool overflow = false, baseOverflow = false;  // base = x^(2^i) no longer fits
  for (; y > 0 && !overflow; y >>= 1) {
    if ((y & 1) != 0) overflow = baseOverflow || __builtin_mul_overflow(result, base, &result);
    if (y > 1) baseOverflow = baseOverflow || __builtin_mul_overflow(base, base, &base);
  }
  if (overflow) return saturate(t, negative ? -inf : inf);
  return t == DType::Int64 ? result : saturate(t, static_cast<double>(result));
}

int64_t intDivRem(BinaryOp op, int64_t x, int64_t y, DType t) {
  if (y == 0) return 0;
  bool isSigned = !isUnsignedInt(t) && t != DType::Bool;
  int64_t q, r;
  if (isSigned && y == -1) {
    q = integerBinary(BinaryOp::Sub, 0, x);
    r = 0;
  } else {
    q = x / y;
    r = x % y;
  }
  if (isSigned && r != 0 && ((r < 0) != (y < 0))) {
    if (op == BinaryOp::FloorDiv) q -= 1;
    if (op == BinaryOp::FloorMod) r += y;
  }
  return op == BinaryOp::Div || op == BinaryOp::FloorDiv ? q : r;
}

double floatMax(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double floatMin(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

Num binary(BinaryOp op, DType t, DType resultType, Num x, Num y) {
  Num r{0, 0};
  if (isFloat(t)) {
    double a = x.f, b = y.f;
    switch (op) {
      case BinaryOp::Add: r.f = a + b; break;
      case BinaryOp::Sub: r.f = a - b; break;
      case BinaryOp::Mul: r.f = a * b; break;
      case BinaryOp::Div: r.f = a / b; break;
      case BinaryOp::Pow: r.f = std::pow(a, b); break;
      case BinaryOp::Max: r.f = floatMax(a, b); break;
      case BinaryOp::Min: r.f = floatMin(a, b); break;
      case BinaryOp::FloorDiv: r.f = std::floor(a / b); break;
      case BinaryOp::Mod: r.f = std::fmod(a, b); break;
      case BinaryOp::FloorMod: {
        double m = std::fmod(a, b);
        r.f = (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
        break;
      }
      case BinaryOp::Eq: r.i = a == b; break;
      case BinaryOp::Ne: r.i = !(a == b); break;
      case BinaryOp::Lt: r.i = a < b; break;
      case BinaryOp::Le: r.i = a <= b; break;
      case BinaryOp::Gt: r.i = a > b; break;
      case BinaryOp::Ge: r.i = a >= b; break;
      case BinaryOp::And: r.i = (a != 0) & (b != 0); break;
      case BinaryOp::Or: r.i = (a != 0) | (b != 0); break;
    }
    if (!loop::isComparison(op) && op != BinaryOp::And && op != BinaryOp::Or) r.f = roundFloat(resultType, r.f);
    return r;
  }
  int64_t a = x.i, b = y.i;
  switch (op) {
    case BinaryOp::Div:
    case BinaryOp::FloorDiv:
    case BinaryOp::Mod:
    case BinaryOp::FloorMod: r.i = intDivRem(op, a, b, t); break;
    case BinaryOp::Pow: r.i = intPower(t, a, b); break;
    default: r.i = integerBinary(op, a, b); break;  // wrapping arithmetic, min/max, comparisons, and/or
  }
  r.i = wrapToWidth(resultType, r.i);
  return r;
}

Num unary(UnaryOp op, DType t, Num x) {
  Num r{0, 0};
  if (!isFloat(t)) {
    switch (op) {
      case UnaryOp::Neg: r.i = integerBinary(BinaryOp::Sub, 0, x.i); break;
      case UnaryOp::Abs: r.i = x.i < 0 ? integerBinary(BinaryOp::Sub, 0, x.i) : x.i; break;
      case UnaryOp::Not: r.i = t == DType::Bool ? !x.i : ~x.i; break;
      default: r.i = x.i; break;  // floor/ceil/round of an integer
    }
    r.i = wrapToWidth(t, r.i);
    return r;
  }
  double v = x.f;
  switch (op) {
    case UnaryOp::Neg: r.f = -v; break;
    case UnaryOp::Exp:
    case UnaryOp::ExpNonPositive: r.f = std::exp(v); break;
    case UnaryOp::Log: r.f = std::log(v); break;
    case UnaryOp::Sqrt: r.f = std::sqrt(v); break;
    case UnaryOp::Rsqrt: r.f = 1.0 / std::sqrt(v); break;
    case UnaryOp::Tanh: r.f = std::tanh(v); break;
    case UnaryOp::Sigmoid: r.f = 1.0 / (1.0 + std::exp(-v)); break;
    case UnaryOp::Erf: r.f = std::erf(v); break;
    case UnaryOp::Sin: r.f = std::sin(v); break;
    case UnaryOp::Cos: r.f = std::cos(v); break;
    case UnaryOp::Abs: r.f = std::fabs(v); break;
    case UnaryOp::Floor: r.f = std::floor(v); break;
    case UnaryOp::Ceil: r.f = std::ceil(v); break;
    case UnaryOp::Round: r.f = std::nearbyint(v); break;
    case UnaryOp::Not: r.f = v == 0; break;
  }
  r.f = roundFloat(t, r.f);
  return r;
}

Num cast(DType from, DType to, Num x) {
  Num r{0, 0};
  if (isFloat(from)) {
    if (isFloat(to)) r.f = roundFloat(to, x.f);
    else r.i = to == DType::Bool ? (x.f != 0) : saturate(to, x.f);
  } else {
    if (isFloat(to)) r.f = roundFloat(to, static_cast<double>(x.i));
    else r.i = wrapToWidth(to, x.i);
  }
  return r;
}

}  // namespace

std::unique_ptr<ScalarKernel> ScalarKernel::tryBuild(const kernel_ir::FusedFunction& f) {
  for (const auto& p : f.params)
    if (p.rank() != 0) return nullptr;
  for (int32_t o : f.outputs)
    if (f.typeOf(o).rank() != 0) return nullptr;
  for (const auto& n : f.nodes) {
    if (n.isConstant()) continue;
    if (n.op->dataDependent || n.op->annotation || n.op->tupleInput || n.op->tupleOutput) return nullptr;
    if (n.op->pattern != ops::OpPattern::ElemWise && n.op->pattern != ops::OpPattern::Broadcast) return nullptr;
  }
  loop::LoopKernel k;
  try {
    k = kernel_ir::lowerToLoops(f);
  } catch (const Error&) {
    return nullptr;
  }
  size_t numParams = f.params.size();
  if (k.buffers.size() != numParams + f.outputs.size()) return nullptr;
  for (const auto& b : k.buffers)
    if (b.isScratch()) return nullptr;

  auto sk = std::unique_ptr<ScalarKernel>(new ScalarKernel);
  for (const auto& p : f.params) sk->inputTypes_.push_back(p.dtype);
  for (int32_t o : f.outputs) sk->outputTypes_.push_back(f.typeOf(o).dtype);
  sk->outputSlot_.assign(f.outputs.size(), -1);

  std::unordered_map<loop::ExprId, int32_t> slot;
  bool ok = true;
  auto isZero = [&](loop::ExprId e) { return k.expr(e).kind == ExprKind::IntConst && k.expr(e).ival == 0; };
  std::function<int32_t(loop::ExprId)> translate = [&](loop::ExprId id) -> int32_t {
    if (auto it = slot.find(id); it != slot.end()) return it->second;
    const loop::ExprNode& n = k.expr(id);
    Step s{n.kind, n.type, n.op, -1, -1, -1, n.ival, n.fval};
    switch (n.kind) {
      case ExprKind::IntConst:
      case ExprKind::FloatConst: break;
      case ExprKind::Load:
        if (n.a < 0 || static_cast<size_t>(n.a) >= numParams || !isZero(n.b)) ok = false;
        s.a = n.a;
        break;
      case ExprKind::Unary:
      case ExprKind::Cast: s.a = translate(n.a); s.ival = static_cast<int64_t>(k.expr(n.a).type); break;
      case ExprKind::Binary:
        s.a = translate(n.a);
        s.b = translate(n.b);
        s.ival = static_cast<int64_t>(k.expr(n.a).type);
        break;
      case ExprKind::Select:
        s.a = translate(n.a);
        s.b = translate(n.b);
        s.c = translate(n.c);
        break;
      default: ok = false; break;
    }
    sk->steps_.push_back(s);
    int32_t at = static_cast<int32_t>(sk->steps_.size() - 1);
    slot.emplace(id, at);
    return at;
  };
  std::function<void(loop::StmtId)> walk = [&](loop::StmtId id) {
    const loop::StmtNode& s = k.stmt(id);
    if (s.kind == loop::StmtKind::Block) {
      for (auto c : s.body) walk(c);
    } else if (s.kind == loop::StmtKind::Store && s.buffer >= static_cast<int32_t>(numParams) && isZero(s.index)) {
      sk->outputSlot_[static_cast<size_t>(s.buffer) - numParams] = translate(s.value);
    } else {
      ok = false;
    }
  };
  if (k.body >= 0) walk(k.body);
  for (int32_t o : sk->outputSlot_) ok &= o >= 0;
  if (!ok) return nullptr;

  // Recognize one integer binary operator over inputs and integer constants.
  if (sk->outputSlot_.size() == 1) {
    const Step& last = sk->steps_[static_cast<size_t>(sk->outputSlot_[0])];
    auto operand = [&](int32_t at, int32_t& input, int64_t& constant) {
      const Step& s = sk->steps_[static_cast<size_t>(at)];
      if (s.kind == ExprKind::Load && !isFloat(s.type)) return input = s.a, true;
      if (s.kind == ExprKind::IntConst) return input = -1, constant = s.ival, true;
      return false;
    };
    DType operandType = static_cast<DType>(last.ival);
    auto op = static_cast<BinaryOp>(last.op);
    bool simpleOp = op != BinaryOp::Div && op != BinaryOp::Mod && op != BinaryOp::FloorDiv &&
                    op != BinaryOp::FloorMod && op != BinaryOp::Pow;
    FastBinary f;
    if (last.kind == ExprKind::Binary && !isFloat(operandType) && !isFloat(last.type) && simpleOp &&
        operand(last.a, f.lhsInput, f.lhsConst) && operand(last.b, f.rhsInput, f.rhsConst)) {
      f.enabled = true;
      f.op = op;
      f.operandType = operandType;
      f.resultType = last.type;
      bool inputsMatch = true;
      for (int32_t in : {f.lhsInput, f.rhsInput})
        if (in >= 0) inputsMatch &= sk->inputTypes_[static_cast<size_t>(in)] == operandType;
      if (inputsMatch && sk->outputTypes_[0] == last.type) sk->fast_ = f;
    }
  }
  return sk;
}

void ScalarKernel::runSteps(const Value* const* inputs, Value* const* outputs) const {
  Num vals[64];
  std::vector<Num> big;
  Num* v = vals;
  if (steps_.size() > 64) {
    big.resize(steps_.size());
    v = big.data();
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    Num r{0, 0};
    switch (s.kind) {
      case ExprKind::IntConst: r.i = s.ival; r.f = static_cast<double>(s.ival); break;
      case ExprKind::FloatConst: r.f = s.fval; r.i = static_cast<int64_t>(s.fval); break;
      case ExprKind::Load: {
        const Value& in = *inputs[s.a];
        DType want = inputTypes_[static_cast<size_t>(s.a)];
        if (in.isScalar()) {
          if (in.dtype() != want)
            throw Error("scalar kernel input " + std::to_string(s.a) + " has dtype " +
                        std::string(dtypeName(in.dtype())) + ", expected " + std::string(dtypeName(want)));
          r.i = in.intValue();
          r.f = in.floatValue();
          if (!isFloat(want)) r.f = 0; else r.i = 0;
        } else {
          Tensor t = in.tensor();
          if (t.rank() != 0 || t.dtype() != want || t.device().kind != Device::Kind::CPU)
            throw Error("scalar kernel input " + std::to_string(s.a) + " is " + in.describe() + ", expected a " +
                        std::string(dtypeName(want)) + " scalar");
          readScalar(t.data(), want, r.i, r.f);
        }
        if (want == DType::Float16) r.f = roundFloat(DType::Float32, r.f);
        break;
      }
      case ExprKind::Unary: r = unary(static_cast<UnaryOp>(s.op), s.type, v[s.a]); break;
      case ExprKind::Binary:
        r = binary(static_cast<BinaryOp>(s.op), static_cast<DType>(s.ival), s.type, v[s.a], v[s.b]);
        break;
      case ExprKind::Select: r = v[s.a].i ? v[s.b] : v[s.c]; break;
      case ExprKind::Cast: r = cast(static_cast<DType>(s.ival), s.type, v[s.a]); break;
      default: break;
    }
    v[i] = r;
  }
  for (size_t o = 0; o < outputTypes_.size(); ++o) {
    DType t = outputTypes_[o];
    const Num& r = v[outputSlot_[o]];
    *outputs[o] = isFloat(t) ? Value::floatScalar(t, roundFloat(t, r.f)) : Value::intScalar(t, wrapToWidth(t, r.i));
  }
}

}  // namespace kiln::kernel_ir
