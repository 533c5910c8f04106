// Kernel kinds: data-dependent, host scalar or compiled.
#include "kernel_ir/kernel_kind.h"

#include "kernel_ir/scalar_kernel.h"

namespace kiln::kernel_ir {

bool isDynamicKernel(const FusedFunction& f) {
  int dynamic = 0, other = 0;
  for (const auto& n : f.nodes) {
    if (n.isConstant()) continue;
    (n.op->dataDependent ? dynamic : other) += 1;
  }
  return dynamic == 1 && other == 0 && f.outputs.size() == 1 && !f.isParam(f.outputs[0]) &&
         !f.node(f.outputs[0]).isConstant();
}

KernelKind kernelKind(const FusedFunction& f) {
  if (!f.library.empty()) return KernelKind::Library;
  if (isDynamicKernel(f)) return KernelKind::Dynamic;
  if (ScalarKernel::tryBuild(f)) return KernelKind::Scalar;
  return KernelKind::Compiled;
}

}  // namespace kiln::kernel_ir
