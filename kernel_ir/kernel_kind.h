// The decision of how the VM runs a kernel, made in one place from its IR: the
// compiler picks the call instruction with it, and the loader's verifier checks
// that every call matches it.
#pragma once

#include "kernel_ir/fused_function.h"
#include "kiln/kernel_kind.h"

namespace kiln::kernel_ir {

// True when `f` is one data-dependent operator over parameters and constants.
bool isDynamicKernel(const FusedFunction& f);

// Library when `f` names an external library; Dynamic when isDynamicKernel;
// Scalar when a host-scalar evaluator can be built for it
// (kernel_ir/scalar_kernel.h); Compiled otherwise.
KernelKind kernelKind(const FusedFunction& f);

}  // namespace kiln::kernel_ir
