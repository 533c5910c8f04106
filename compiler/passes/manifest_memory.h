// ManifestMemory: makes tensor memory explicit for every function of a
// lambda-lifted, placed module, as the pass before bytecode emission.
//
// For every kernel call it decides where the outputs' memory comes from:
//   - Arena: a storage shared with other static temporaries (planning, below),
//     at a byte offset; the first member allocates the arena, and the arena's
//     register is given up after the last member is placed in it;
//   - Static: storage of its own, its size and shape known at compile time;
//   - ShapeFunction: storage sized at run time from the kernel's shape function
//     (an output with a `?` dimension);
//   - None: a host-scalar kernel writes registers, a data-dependent kernel
//     allocates its output at its true extent, and a kernel that only reshapes
//     its input is a view of it (its shape a constant or from the shape function).
// It also records which variables are read at all (the emitter releases the
// others at birth). Releases of values after their last use are liveness's
// (passes/liveness.h); turning the decisions into alloc_storage, alloc_tensor,
// shape_func and invoke_kernel instructions is the emitter's
// (codegen/bytecode_emitter.h). `kilnc --emit memory` prints the plan.
//
// Storage planning: within a block, statically sized kernel outputs that only
// kernels read (no escape into data structures, calls or results) share one
// storage when their lifetimes do not overlap and sharing does not raise the
// block's peak over what the pool alone would need (by more than 1/32); or else
// outputs of one pool size class reuse a storage whose previous occupant died
// just before, with no allocation in between, so a chain of kernels ping-pongs
// between two storages. Storage is shared only among tensors on one device.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/passes/device_placement.h"
#include "compiler/passes/kernel_table_builder.h"

namespace kiln::compiler {

// The globals that get code: the module's functions, less prelude functions
// nothing reachable uses.
std::unordered_set<std::string_view> reachableGlobals(const ir::Module& m);

struct Arena {
  uint64_t bytes = 0;
  Device device;
};

struct ArenaSlot {
  uint32_t arena = 0;
  uint64_t offset = 0;
  bool first = false, last = false;  // in program order: allocates the arena / gives up its register
};

enum class OutputMemory { Arena, Static, ShapeFunction, None };

struct KernelCallMemory {
  const ir::Call* call = nullptr;
  const ir::Var* boundTo = nullptr;  // the let variable, or null (a call in tail position)
  KernelRef kernel{};
  CallKind kind = CallKind::Compiled;  // at its device
  Device device;
  OutputMemory source = OutputMemory::None;
  ArenaSlot slot;  // source Arena
};

struct FunctionMemory {
  std::string name;
  std::vector<Arena> arenas;
  std::unordered_map<const ir::Call*, KernelCallMemory> calls;
  std::vector<const ir::Call*> order;  // the calls in program order
  std::unordered_set<const ir::Var*> used;  // variables read anywhere in the body
};

struct MemoryPlan {
  std::vector<FunctionMemory> functions;  // in the module's order, reachable globals only

  const FunctionMemory& of(std::string_view function) const;
  std::string toString() const;
};

struct ManifestOptions {
  bool planMemory = true;              // share storage between temporaries
  const DevicePlan* devices = nullptr;  // null: everything on the host
};

MemoryPlan manifestMemory(const ir::Module& lifted, KernelTableBuilder& kernels, const ManifestOptions& options = {});

}  // namespace kiln::compiler
