// KernelTable: compiled kernels per (kernel, device) and host-scalar evaluators.
#include "runtime/kernel_table.h"

#include "bytecode/opcodes.h"
#include "jit/kernel.h"
#include "kernel_ir/scalar_kernel.h"
#include "kiln/error.h"

namespace kiln::runtime {

KernelTable::KernelTable(std::shared_ptr<const Executable> exe, std::shared_ptr<jit::KernelCache> cache)
    : exe_(std::move(exe)), cache_(std::move(cache)) {
  for (const KernelInfo& k : exe_->kernels()) {
    std::unique_ptr<const kernel_ir::ScalarKernel> s;
    if (k.kind == KernelKind::Scalar) {
      s = kernel_ir::ScalarKernel::tryBuild(*k.function);
      // The kind was decided by the same builder (kernel_ir/kernel_kind.cc).
      if (!s) throw Error("internal: kernel " + k.function->name + " is classified scalar but has no host evaluator");
    }
    scalar_.push_back(std::move(s));
  }
}

KernelTable::~KernelTable() = default;

const jit::CompiledKernel& KernelTable::compiled(uint32_t k, Device device) {
  if (k >= exe_->kernels().size()) throw Error("kernel index out of range");
  uint64_t key = static_cast<uint64_t>(k) << 32 | bytecode::encodeDevice(device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = compiled_.find(key);
    if (it != compiled_.end()) return *it->second;
  }
  // The cache compiles each kernel once even when many threads ask at once.
  auto kernel = cache_->get(*exe_->kernels()[k].function, device);
  std::lock_guard<std::mutex> lock(mu_);
  return *compiled_.emplace(key, std::move(kernel)).first->second;
}

}  // namespace kiln::runtime
