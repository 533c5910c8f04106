// KernelKind: how the VM runs one of an executable's kernels.
//
// The kind is a function of the kernel's IR alone (kernel_ir/kernel_kind.h makes
// the decision, once, for the compiler that emits the call and the loader that
// verifies it); an executable reports it per kernel.
#pragma once

#include <cstdint>

namespace kiln {

enum class KernelKind : uint8_t {
  Compiled,  // JIT-compiled loops, destination passing
  Scalar,    // only element-wise operators on 0-d tensors: evaluated on host scalars
  Dynamic,   // a data-dependent operator (arange, argwhere, dyn.*): run natively
  Library,   // an external library runs it (its FusedFunction names the library, e.g. dnnl);
             // called as a compiled kernel is (destination passing, the same instruction)
};

}  // namespace kiln
