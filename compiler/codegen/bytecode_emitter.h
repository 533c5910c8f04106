// Bytecode emission: a lambda-lifted module in A-normal form to an Executable.
//
// Each global function becomes one bytecode function; a lifted closure global
// `def @g(captured...) { /* closure */ fn (params...) {...} }` becomes one function
// over captured values then parameters. Memory is explicit in the output: each
// kernel call allocates its outputs' storage and tensors first (static shapes as
// constants, `?` shapes from the kernel's shape function) and then invokes the
// kernel in destination-passing style; host-scalar kernels run on registers with
// no allocation; data-dependent kernels allocate their true-extent outputs; a
// kernel that only reshapes its input becomes a zero-copy `reshape`.
//
// Registers: parameters take registers 0..n-1; every other value gets a register
// when bound and gives it back after its last use (counted over the function, so
// a value used on one branch of an `if` is free on the other), and a heap value's
// register is released right after its last use. Calls in tail position become
// tail calls.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "compiler/ir/module.h"
#include "kiln/executable.h"

namespace kiln::compiler {

struct EmitOptions {
  // `main`'s parameters bound to constants (weights), by name without `%`.
  std::map<std::string, Tensor> params;
};

std::shared_ptr<Executable> emitBytecode(const ir::Module& lifted, const EmitOptions& opts = {});

}  // namespace kiln::compiler
