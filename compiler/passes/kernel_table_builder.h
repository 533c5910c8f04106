// KernelTableBuilder: the executable's kernel table, built from the module's
// primitive (fused) functions. Each becomes a kernel_ir::FusedFunction; equal
// ones (by content) share one entry and one name; each entry carries the call
// kind the VM uses for it (kernel_ir/kernel_kind.h decides compiled, scalar or
// data-dependent; a kernel that only reshapes its input becomes a zero-copy
// view). Entries are numbered in the order they are first asked for, so a pass
// that meets every call first (manifest_memory.h) fixes the numbering.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/module.h"
#include "kernel_ir/fused_function.h"

namespace kiln::compiler {

enum class CallKind { Compiled, Scalar, Dynamic, Reshape };

struct KernelRef {
  uint32_t index;
  CallKind kind;
  const kernel_ir::FusedFunction* fn;
};

class KernelTableBuilder {
 public:
  explicit KernelTableBuilder(const ir::Module& m) : m_(m) {}

  KernelRef kernel(const ir::Function* prim);
  // How a call of `k` placed on `device` runs: a host-scalar kernel off the
  // host runs compiled, on tensors there.
  static CallKind kindAt(const KernelRef& k, Device device);

  const std::vector<std::shared_ptr<const kernel_ir::FusedFunction>>& kernels() const { return kernels_; }

 private:
  const ir::Module& m_;
  std::vector<std::shared_ptr<const kernel_ir::FusedFunction>> kernels_;
  std::unordered_map<const ir::Function*, KernelRef> byNode_;
  std::unordered_map<uint64_t, KernelRef> byHash_;
  std::unordered_set<std::string> names_;
};

}  // namespace kiln::compiler
