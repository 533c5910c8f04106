// LibraryKernel: a kernel an external library runs (kernel_ir/library_support.h).
//
// CompiledKernel holds one in place of machine code when its FusedFunction names
// a library, and hands it every call with the same destination-passing contract
// as compiled code: inputs, outputs allocated by the VM to the shapes of the
// kernel's shape function, and the concrete shape of every value. A library
// makes its own objects (oneDNN primitives) once per set of shapes and keeps
// them; weights that are executable constants (`prepared` non-null for that
// weight input: the constant's own data, alive as long as the executable) are
// converted to the library's layout once and kept too. Failures are kiln::Errors
// naming the library and the kernel. Thread-safe: run() may be called from many
// threads at once.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernel_ir/fused_function.h"
#include "kiln/tensor.h"

namespace kiln::jit {

class LibraryKernel {
 public:
  virtual ~LibraryKernel() = default;
  // The parameters read as weights, in the order run() gets their `prepared` pointers.
  virtual const std::vector<uint32_t>& weightInputs() const = 0;
  virtual void run(std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs,
                   const std::vector<Shape>& shapes, std::span<const float* const> prepared) const = 0;
};

// The library kernel for `f` (f.library non-empty) on `device`; throws kiln::Error
// when the library is not built in, does not run on that device, or does not take `f`.
std::shared_ptr<const LibraryKernel> makeLibraryKernel(const kernel_ir::FusedFunction& f, Device device);

}  // namespace kiln::jit
