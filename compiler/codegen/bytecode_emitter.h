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
// when bound and gives it back after its last use (passes/liveness.h: a value
// used on one branch of an `if` is released on entry to the other), and a heap
// value is released right after its last use, or moved into the call or
// constructor that uses it last. Calls in tail position become tail calls.
//
// Storage planning: within a block, statically sized kernel outputs that only
// kernels read (no escape into data structures, calls or results) share one
// storage when their lifetimes do not overlap, their sizes fall in one pool size
// class, and no allocation happens while the storage would sit idle between
// them; so sharing never raises the peak above what the pool alone would need,
// and a chain of kernels ping-pongs between two storages.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "compiler/ir/module.h"
#include "compiler/passes/device_placement.h"
#include "kiln/executable.h"

namespace kiln::compiler {

struct EmitOptions {
  // `main`'s parameters bound to constants (weights), by name without `%`.
  std::map<std::string, Tensor> params;
  bool planMemory = true;  // share storage between non-overlapping temporaries
  // Where each value lives (passes/device_placement.h); null: everything on cpu.
  const DevicePlan* devices = nullptr;
};

std::shared_ptr<const Executable> emitBytecode(const ir::Module& lifted, const EmitOptions& opts = {});

}  // namespace kiln::compiler
