// Bytecode emission: a lambda-lifted module in A-normal form, with its memory
// made explicit (passes/manifest_memory.h), to an Executable.
//
// Each global function becomes one bytecode function; a lifted closure global
// `def @g(captured...) { /* closure */ fn (params...) {...} }` becomes one function
// over captured values then parameters. Each kernel call becomes the instructions
// the memory pass decided: storage and tensors for its outputs (static shapes as
// constants, `?` shapes from the kernel's shape function, or a place in a shared
// arena), then the kernel in destination-passing style; host-scalar kernels run
// on registers; data-dependent kernels allocate their true-extent outputs; a
// kernel that only reshapes its input becomes a zero-copy `reshape`.
//
// Registers: parameters take registers 0..n-1; every other value gets a register
// when bound and gives it back after its last use (passes/liveness.h: a value
// used on one branch of an `if` is released on entry to the other), and a heap
// value is released right after its last use, or moved into the call or
// constructor that uses it last. Calls in tail position become tail calls.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "compiler/ir/module.h"
#include "compiler/passes/device_placement.h"
#include "compiler/passes/manifest_memory.h"
#include "kiln/executable.h"

namespace kiln::compiler {

struct EmitOptions {
  // `main`'s parameters bound to constants (weights), by name without `%`.
  std::map<std::string, Tensor> params;
  bool planMemory = true;  // share storage between non-overlapping temporaries
  // Where each value lives (passes/device_placement.h); null: everything on cpu.
  const DevicePlan* devices = nullptr;
};

// Emits with the memory pass's plan, made over `kernels` (which numbers the kernels).
std::shared_ptr<const Executable> emitBytecode(const ir::Module& lifted, const EmitOptions& opts, KernelTableBuilder& kernels,
                                               const MemoryPlan& memory);
// Runs the memory pass, then emits.
std::shared_ptr<const Executable> emitBytecode(const ir::Module& lifted, const EmitOptions& opts = {});

}  // namespace kiln::compiler
