// KernelTable: what running one executable needs besides the executable itself —
// each kernel compiled for each device it runs on, and each host-scalar kernel's
// evaluator — made once and shared by the VMs of one Runtime over that executable.
//
// Thread-safety: every member may be called from any thread. Scalar evaluators
// are built when the table is made and only read after. compiled() takes a lock
// to find a kernel (VMs remember what it returns, so they ask once per kernel and
// device); a kernel not yet compiled is compiled through the Runtime's cache,
// outside the lock, and concurrent requests for it compile it once. The
// references it returns stay valid as long as the table.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/executable.h"

namespace kiln::jit {
class CompiledKernel;
class KernelCache;
}  // namespace kiln::jit
namespace kiln::kernel_ir {
class ScalarKernel;
}  // namespace kiln::kernel_ir

namespace kiln::runtime {

class KernelTable {
 public:
  // `cache` compiles for this table; the table keeps it (and `exe`) alive.
  KernelTable(std::shared_ptr<const Executable> exe, std::shared_ptr<jit::KernelCache> cache);
  ~KernelTable();

  const Executable& executable() const { return *exe_; }
  // Kernel `k` compiled for `device`, compiling it on first use; throws kiln::Error.
  const jit::CompiledKernel& compiled(uint32_t k, Device device = {});
  // Kernel `k`'s host evaluator; null unless its kind is Scalar.
  const kernel_ir::ScalarKernel* scalar(uint32_t k) const { return scalar_[k].get(); }

 private:
  std::shared_ptr<const Executable> exe_;
  std::shared_ptr<jit::KernelCache> cache_;
  std::vector<std::unique_ptr<const kernel_ir::ScalarKernel>> scalar_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<const jit::CompiledKernel>> compiled_;  // (kernel << 32 | device)
};

}  // namespace kiln::runtime
