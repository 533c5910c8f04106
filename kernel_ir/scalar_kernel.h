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

class ScalarKernel {
 public:
  // Null when `f` is not a scalar kernel.
  static std::unique_ptr<ScalarKernel> tryBuild(const kernel_ir::FusedFunction& f);

  size_t numInputs() const { return inputTypes_.size(); }
  size_t numOutputs() const { return outputTypes_.size(); }

  // inputs[i] is a register scalar or a 0-d CPU tensor; writes register scalars.
  // Every input is read before any output is written (outputs may alias inputs).
  void run(const Value* const* inputs, Value* const* outputs) const;

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
    uint8_t op = 0;
    DType operandType = DType::Int32, resultType = DType::Int32;
    int32_t lhsInput = -1, rhsInput = -1;  // input index, or -1 for the constant
    int64_t lhsConst = 0, rhsConst = 0;
  };
  bool runFast(const Value* const* inputs, Value* const* outputs) const;

  FastBinary fast_;
  std::vector<DType> inputTypes_, outputTypes_;
  std::vector<Step> steps_;               // in dependency order
  std::vector<int32_t> outputSlot_;       // step index whose value each output takes
};

}  // namespace kiln::kernel_ir
