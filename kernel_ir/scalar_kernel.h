// Host evaluation of scalar kernels: fused functions whose parameters and results
// are all 0-d tensors and whose operators are element-wise (`%i - 1`, `%i < %n`).
//
// Such kernels compute loop counters and conditions. The VM runs them on register
// scalars directly, without a kernel call or an allocation, by interpreting the
// same loop-level IR the code generators consume (so each operator is still
// lowered exactly once, by its compute rule). Arithmetic follows the CPU code
// generator: integer results wrap to their width, integer division by zero gives
// 0, float-to-int casts saturate, float32 results round to float32.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kernel_ir/fused_function.h"
#include "kernel_ir/loop_ir.h"
#include "kiln/value.h"

namespace kiln::kernel_ir {

// The integer operators other than division, remainder and power, at 64 bits
// (add, subtract and multiply wrapping, without signed-overflow UB): the
// one-operator path's whole set, and the step interpreter's for these.
inline int64_t integerBinary(loop::BinaryOp op, int64_t a, int64_t b) {
  using loop::BinaryOp;
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  switch (op) {
    case BinaryOp::Add: return static_cast<int64_t>(u(a) + u(b));
    case BinaryOp::Sub: return static_cast<int64_t>(u(a) - u(b));
    case BinaryOp::Mul: return static_cast<int64_t>(u(a) * u(b));
    case BinaryOp::Max: return a > b ? a : b;
    case BinaryOp::Min: return a < b ? a : b;
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::And: return a & b;
    case BinaryOp::Or: return a | b;
    default: return 0;  // division, remainder, power: never asked (tryBuild, binary())
  }
}
// An integer result at its dtype's width.
inline int64_t wrapToWidth(DType t, int64_t v) {
  switch (t) {
    case DType::Int8: return static_cast<int8_t>(v);
    case DType::Int16: return static_cast<int16_t>(v);
    case DType::Int32: return static_cast<int32_t>(v);
    case DType::UInt8: return static_cast<uint8_t>(v);
    case DType::UInt16: return static_cast<uint16_t>(v);
    case DType::Bool: return v != 0;
    default: return v;
  }
}

class ScalarKernel {
 public:
  // Null when `f` is not a scalar kernel.
  static std::unique_ptr<ScalarKernel> tryBuild(const kernel_ir::FusedFunction& f);

  size_t numInputs() const { return inputTypes_.size(); }
  size_t numOutputs() const { return outputTypes_.size(); }

  // inputs[i] is a register scalar or a 0-d CPU tensor; writes register scalars.
  // Every input is read before any output is written (outputs may alias inputs).
  // Inline up to the one-operator case (a loop's counter and condition), so a
  // VM step pays no call for it; anything else runs the step interpreter.
  void run(const Value* const* inputs, Value* const* outputs) const {
    if (fast_.enabled && runFast(inputs, outputs)) return;
    runSteps(inputs, outputs);
  }

 private:
  struct Step {
    loop::ExprKind kind;
    DType type;
    uint8_t op;
    int32_t a, b, c;  // indexes into the value array (or the input for loads)
    int64_t ival;
    double fval;
  };
  // The common control-flow case, `%i - 1` or `%i < %n` on integers: one binary
  // operator over inputs and constants, run without the step interpreter.
  struct FastBinary {
    bool enabled = false;
    loop::BinaryOp op = loop::BinaryOp::Add;
    DType operandType = DType::Int32, resultType = DType::Int32;
    int32_t lhsInput = -1, rhsInput = -1;  // input index, or -1 for the constant
    int64_t lhsConst = 0, rhsConst = 0;
  };
  bool runFast(const Value* const* inputs, Value* const* outputs) const {
    int64_t x = fast_.lhsConst, y = fast_.rhsConst;
    if (fast_.lhsInput >= 0) {
      const Value& v = *inputs[fast_.lhsInput];
      if (!v.isScalar() || v.dtype() != fast_.operandType) return false;
      x = v.intValue();
    }
    if (fast_.rhsInput >= 0) {
      const Value& v = *inputs[fast_.rhsInput];
      if (!v.isScalar() || v.dtype() != fast_.operandType) return false;
      y = v.intValue();
    }
    *outputs[0] = Value::intScalar(fast_.resultType, wrapToWidth(fast_.resultType, integerBinary(fast_.op, x, y)));
    return true;
  }
  void runSteps(const Value* const* inputs, Value* const* outputs) const;

  FastBinary fast_;
  std::vector<DType> inputTypes_, outputTypes_;
  std::vector<Step> steps_;               // in dependency order
  std::vector<int32_t> outputSlot_;       // step index whose value each output takes
};

}  // namespace kiln::kernel_ir
