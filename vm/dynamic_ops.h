// Data-dependent operators (arange, argwhere, dyn.reshape, dyn.broadcast_to,
// dyn.zeros, dyn.strided_slice): their output extents depend on operand values,
// so the VM runs them natively and allocates outputs of their true size. Static
// shape questions (reshape's -1 and 0, broadcasting, slice clamping) go through
// the shape rules of the corresponding static operators, so both agree.
#pragma once

#include <span>

#include "kernel_ir/fused_function.h"
#include "kiln/tensor.h"

namespace kiln::vm {

class TensorMemory;

// Runs such a kernel on CPU tensors, its output from `memory` on `device` (the
// kernel's placement, a CPU device); throws kiln::Error on bad operands.
Tensor runDynamicKernel(const kernel_ir::FusedFunction& f, std::span<const Tensor> inputs, TensorMemory& memory, Device device = {});

}  // namespace kiln::vm
