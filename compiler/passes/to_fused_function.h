// Converts a primitive function — a typed IR function whose body only calls
// operators on its tensor parameters, scalar literals and let-bound results — to
// the runtime FusedFunction that the JIT compiles. The fusion pass produces such
// functions; tests and tools also build them from Relay text directly.
#pragma once

#include <string>

#include "compiler/ir/expr.h"
#include "kernel_ir/fused_function.h"

namespace kiln::compiler {

// `fn` must be type-checked. A tuple result gives several outputs. Throws
// kiln::Error (with the source location) for anything a kernel cannot hold.
kernel_ir::FusedFunction toFusedFunction(const ir::Function* fn, const std::string& name, const std::string& file = "");

}  // namespace kiln::compiler
