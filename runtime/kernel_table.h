// KernelTable: what running one executable needs besides the executable itself —
// each kernel compiled for each device it runs on, and each host-scalar kernel's
// evaluator — made once and shared by the VMs of one Runtime over that executable.
//
// It also holds the executable's prepared constants: a float32 matrix constant
// that reaches a GEMM as its B operand (a dense or matmul weight) is packed into
// the GEMM's layout (jit::packGemmB), and convolution filters into the direct
// convolution's (jit::packConvFilter), the first time a kernel asks, once per
// table — shared by every VM and thread over the executable, immutable, never
// packed again per call. The packed forms live in the Runtime's memory pools
// (counted in their statistics and in preparedStats()); they are the runtime's,
// not the executable's: nothing of them is serialized.
//
// Kernels are compiled through the Runtime's cache, which takes the executable's
// precompiled machine code for a kernel when it matches this CPU and build
// (kiln/executable.h), then the disk cache, then the code generator.
// compileAll() makes every kernel up front, in parallel on a thread pool (what a
// Runtime does when it first sees an executable, unless told not to), so a cold
// start compiles on every core instead of one kernel at a time at first call.
//
// Thread-safety: every member may be called from any thread. Scalar evaluators
// are built when the table is made and only read after. compiled() takes a lock
// to find a kernel (VMs remember what it returns, so they ask once per kernel and
// device); a kernel not yet compiled is compiled through the Runtime's cache,
// outside the lock, and concurrent requests for it compile it once. The
// references it returns stay valid as long as the table.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernel_ir/loop_ir.h"
#include "kernel_ir/row_batching.h"
#include "kiln/executable.h"
#include "kiln/memory.h"

namespace kiln::jit {
class CompiledKernel;
class KernelCache;
}  // namespace kiln::jit
namespace kiln::kernel_ir {
class ScalarKernel;
}  // namespace kiln::kernel_ir
namespace kiln::device {
class ThreadPool;
}  // namespace kiln::device

namespace kiln::runtime {

class KernelTable {
 public:
  // `cache` compiles for this table; the table keeps it (and `exe`) alive.
  KernelTable(std::shared_ptr<const Executable> exe, std::shared_ptr<jit::KernelCache> cache,
              std::shared_ptr<MemoryPools> pools = nullptr);
  ~KernelTable();

  const Executable& executable() const { return *exe_; }
  // Kernel `k` compiled for `device`, compiling it on first use; throws kiln::Error.
  const jit::CompiledKernel& compiled(uint32_t k, Device device = {});
  // Compiles (or loads) every JIT kernel for the executable's default device when
  // that is a CPU, in parallel on `pool` (null: the process default pool), and
  // returns the wall time it took. A kernel that fails is left to its first call,
  // which reports the error.
  double compileAll(device::ThreadPool* pool);
  // `t` prepared in `layout` (GemmB: packed as a GEMM's B operand, param 1 when
  // stored n x k; ConvFilter: packed as a convolution's filters, param = groups)
  // when it is one of the executable's constants (or a view of one, same shape),
  // else null. The pointer stays valid as long as the table.
  const float* prepared(const Tensor& t, loop::PreparedLayout layout, int64_t param);
  struct PreparedStats {
    uint64_t count = 0;    // packed constants made
    uint64_t bytes = 0;    // their size
    uint64_t lookups = 0;  // calls of prepared(): a VM's inline cache answers its repeats without one
  };
  PreparedStats preparedStats() const;

  // Kernel `k`'s plan for running its calls over stacked rows on the host
  // (kernel_ir/row_batching.h), made on the first ask, once per table; null
  // when `k` is no compiled kernel or has no plan.
  const kernel_ir::RowBatchPlan* rowBatchPlan(uint32_t k);
  // Its batched twin, compiled on the first ask (the first batch: a kernel whose
  // calls never find a partner costs no compile); null when it does not compile
  // (the calls then run one by one, as without batching).
  const jit::CompiledKernel* rowBatchedTwin(uint32_t k);

  // Kernel `k`'s host evaluator; null unless its kind is Scalar.
  const kernel_ir::ScalarKernel* scalar(uint32_t k) const { return scalar_[k].get(); }

 private:
  std::shared_ptr<const Executable> exe_;
  std::shared_ptr<jit::KernelCache> cache_;
  std::vector<std::unique_ptr<const kernel_ir::ScalarKernel>> scalar_;
  std::shared_ptr<MemoryPools> pools_;  // where packed constants live (null: the process default)
  std::unordered_map<const void*, uint32_t> weightConstants_;  // data -> index: float32 2-D and 4-D host constants
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<const jit::CompiledKernel>> compiled_;  // (kernel << 32 | device)
  struct RowBatching {
    std::optional<kernel_ir::RowBatchPlan> plan;
    bool twinTried = false;
    std::shared_ptr<const jit::CompiledKernel> twin;
  };
  std::unordered_map<uint32_t, std::unique_ptr<RowBatching>> rowBatching_;
  RowBatching& rowBatchingLocked(uint32_t k);
  struct PreparedKey {
    uint32_t constant;
    loop::PreparedLayout layout;
    int64_t param;
    bool operator==(const PreparedKey&) const = default;
  };
  struct PreparedKeyHash {
    size_t operator()(const PreparedKey& k) const {
      return std::hash<uint64_t>()((uint64_t(k.constant) << 8 | uint64_t(k.layout)) ^ (uint64_t(k.param) << 40));
    }
  };
  std::unordered_map<PreparedKey, Tensor, PreparedKeyHash> prepared_;
  PreparedStats preparedStats_;
  std::atomic<uint64_t> preparedLookups_{0};
};

// A float32 constant `c` packed in `layout` (as KernelTable::prepared packs it),
// from `pool`; an undefined tensor when it does not fit the layout.
Tensor packWeight(const Tensor& c, loop::PreparedLayout layout, int64_t param, PooledAllocator& pool);

}  // namespace kiln::runtime
