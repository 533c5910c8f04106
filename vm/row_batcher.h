// RowBatcher: a VM's kernel calls deferred and run as batches over stacked rows
// (dynamic batching, as DyNet's autobatching and TensorFlow Fold do for trees).
//
// A recursion over a tree calls one kernel per node with 1 x d rows and the same
// weights; run as they come, the calls stream the weights once each, and a
// product of one row runs at the speed of that stream. Deferred instead, the
// calls of a whole tree are known before any runs: those of one depth in the
// dataflow do not depend on one another, and calls of one kernel over the same
// weights there run as one call of the kernel's batched twin over their rows
// stacked (kernel_ir/row_batching.h). Levels run in order, so every call still
// sees its operands' final values.
//
// The VM defers a call (defer) when the kernel has a plan, runs on the host, and
// its operands are what its types say, with outputs that share their memory
// with no other tensor. It runs everything deferred (flush) before any
// instruction that could see a deferred result's memory: every instruction the
// opcode table does not mark P (bytecode/opcodes.def), an invoke_kernel it does
// not defer, a fork that goes to another thread, and the end of a run. A
// deferred call keeps its operands (owned references), so nothing it reads or
// writes is recycled or freed before it runs; the P instructions neither read nor
// write tensor data nor place a tensor in a storage block, so nothing else can
// touch that memory in between.
//
// A kernel whose calls, deferred, ran in batches of one kSingleFlushes flushes
// in a row (a loop's chain of steps) is run as called for its next
// kBackOffCalls calls, so a program with nothing to batch pays a deferral now
// and then, not at every call (a tree's root alone in the last flush of a run
// is one such flush, between flushes that batch). At most
// kMostCalls calls (or kMostBytes of their outputs) wait at once: deferral
// keeps results (and what they were computed from) alive until their flush,
// so it may raise a program's peak memory by that much and no more.
//
// Used by its VM's thread alone.
#pragma once

#include <cstdint>
#include <vector>

#include "bytecode/operands.h"
#include "kiln/value.h"
#include "runtime/kernel_table.h"

namespace kiln::vm {

class BoundKernels;
class TensorMemory;

class RowBatcher {
 public:
  RowBatcher(runtime::KernelTable& table, BoundKernels& kernels, TensorMemory& memory);
  ~RowBatcher();

  // Defers kernel `k` on the registers `ins` and `outs` of the frame at `R`
  // when it may; false: the caller runs it now (after flush()). Inline for the
  // kernels that never defer and those backing off: their calls pay a load and
  // a branch or two, not a call.
  bool defer(uint32_t k, const Value* R, bytecode::RegisterList ins, bytecode::RegisterList outs) {
    KernelState& s = states_[k];
    if (s.looked && !s.worthIt) return false;
    if (s.backOff) {
      --s.backOff;
      return false;
    }
    return deferLooked(k, R, ins, outs);
  }
  bool pending() const { return !calls_.empty(); }
  // Runs every deferred call, level by level, batched where it can. Throws a
  // kernel's kiln::Error; nothing stays deferred either way.
  void flush();
  // Forgets the deferred calls unrun (after an error ends the run).
  void drop() noexcept;

  // Since the VM was made: batched calls of the twins, and the calls they ran.
  uint64_t batches() const { return batches_; }
  uint64_t batchedCalls() const { return batchedCalls_; }

  static constexpr uint32_t kBackOffCalls = 64;
  static constexpr uint32_t kSingleFlushes = 4;
  static constexpr size_t kMostCalls = 4096;
  static constexpr uint64_t kMostBytes = 4ull << 20;
  // Element-wise kernels (no shared weight to stream once) are deferred only
  // for rows this small: batching them saves call overhead, and copying big
  // rows in and out would cost more.
  static constexpr uint64_t kMostRowBytesWithoutWeights = 16 * 1024;

 private:
  struct KernelState {
    const kernel_ir::RowBatchPlan* plan = nullptr;
    const jit::CompiledKernel* twin = nullptr;  // looked up at the kernel's first batch
    bool looked = false, twinLooked = false;
    bool worthIt = false;       // a plan, and a product (shared weights) or small rows
    uint32_t backOff = 0;       // calls to run as called
    uint32_t singleFlushes = 0; // flushes in a row that ran its calls one by one
    uint32_t flushedCalls = 0;  // in the flush under way: calls, and those batched
    uint32_t flushedBatched = 0;
  };
  struct Call {
    uint32_t kernel;
    uint32_t level;   // 1 + the deepest deferred call it reads a result of
    uint32_t first;   // operands_[first..]: the inputs, then the outputs
    uint64_t shared;  // a hash of the shared inputs' data pointers
  };
  KernelState& stateOf(uint32_t k);
  bool deferLooked(uint32_t k, const Value* R, bytecode::RegisterList ins, bytecode::RegisterList outs);
  void runOne(const Call& c);
  void runBatch(const Call* const* calls, size_t n);

  runtime::KernelTable& table_;
  BoundKernels& kernels_;
  TensorMemory& memory_;
  std::vector<KernelState> states_;
  std::vector<Call> calls_;
  // Operands: owned references, but for views where another slot owns the
  // object until drop(): shared inputs seen before in this queue are views of
  // the one reference in kept_, and row inputs that are an earlier deferred
  // call's results views of that call's output slot. The weights every call
  // passes, and a tree's inner results, then cost no locked add and subtract
  // per call (with two VMs deferring on two threads, the weights' counts
  // bounced between cores).
  std::vector<Value> operands_;
  std::vector<Value> kept_;
  // A deferred call's output object -> its level: open addressing (a power of
  // two slots, at most half full), emptied by flush.
  struct LevelSlot {
    const void* object = nullptr;
    uint32_t level = 0;
  };
  std::vector<LevelSlot> levels_;
  size_t levelCount_ = 0;
  uint32_t levelOf(const void* object) const;  // 0: not a deferred call's
  void setLevel(const void* object, uint32_t level);
  std::vector<const Call*> order_;  // flush's, kept for its capacity
  std::vector<uint32_t> levelStarts_;  // flush's counting sort by level, likewise
  uint64_t heldBytes_ = 0;
  uint64_t batches_ = 0, batchedCalls_ = 0;
};

}  // namespace kiln::vm
