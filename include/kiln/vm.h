// VirtualMachine: runs an Executable's bytecode.
//
// State: a growable register stack (each frame a window of 16-byte Values) and a
// frame stack (function, return pc, base, destination register). Frames live on
// the heap, so recursion depth is bounded by `maxCallDepth`, not the C++ stack;
// calls in tail position reuse their frame, so tail-recursive loops run in
// constant space. Kernels run through the kernel table that the VM's Runtime
// keeps for the executable (shared with the Runtime's other VMs over it), and
// their parallel loops on the Runtime's thread pool.
//
// Threads: a VM is used by one thread at a time; give each thread its own VM over
// one shared Executable. invoke() leaves the VM reusable after an error.
//
// Forks: where the compiler found two independent calls of pure functions (a
// tree's two subtrees), it emits `fork` for the first and `join` after the
// second. The VM then runs the first on a worker of its Runtime's pool, in a
// second VM of its own (same executable and runtime; the same memory pools
// where the caller gave them, else pools of its own), while it runs the second
// itself; the join waits for it. It does so only when the pool
// has a free worker, the executable runs on the host alone, no fork is already
// in flight, profiling and memory tracing are off, and the last fork at that
// place took long enough to pay for itself (else the next few run inline).
// Otherwise `fork` is a plain call. Results and errors are those of running
// the two calls one after the other: when both fail, the first's error is
// the one reported.
//
// Dynamic batching (VMOptions::rowBatching, vm/row_batcher.h): calls of a
// kernel over one-row tensors with the same weights are deferred until
// something reads their results (any instruction but those that only pass
// values along, a fork, the end of invoke()); then the calls that do not depend
// on one another run as one call over their rows stacked, one batch per level
// of the dataflow. A tree reduced by recursion streams its weights once per
// level instead of once per node. Results are those of running each call
// where it is made, within float tolerance (a product of many rows sums in
// another order than one of one row).
//
// Stopping a run: requestStop() (from any thread) and VMOptions::timeLimit make
// the running invoke() fail with a kiln::Error at its next function call, tail
// call (a loop's step), fork or backward jump, forked calls included: what a
// server does to a request whose client left or whose time ran out (ONNX
// Runtime's RunOptions terminate flag, a deadline). A kernel call already
// started runs to its end first. The VM stays usable, as after any error.
//
// GPUs: kernels and copies on a GPU are queued on the VM's stream for that GPU
// and run asynchronously; the host waits only where a value crosses to the host
// (a copy there: a shape, a control-flow scalar) and at the end of invoke(), so
// the values it returns are complete. Returned tensors may live on a GPU:
// copyTo() brings them to the host.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/executable.h"
#include "kiln/memory.h"
#include "kiln/runtime.h"
#include "kiln/value.h"

namespace kiln {

namespace vm {
class BoundKernels;
class GpuStreams;
class TensorMemory;
class MemoryTrace;
class RowBatcher;
}  // namespace vm

struct VMOptions {
  // The kernel cache, thread pool and kernel tables the VM uses; null:
  // Runtime::processDefault(). VMs of one Runtime over one executable share its
  // compiled kernels.
  std::shared_ptr<Runtime> runtime;
  // Frames deeper than this fail with "recursion too deep" (a kiln::Error).
  size_t maxCallDepth = 1'000'000;
  // Where tensor memory comes from. Null: the VM makes pools of its own. Share
  // one MemoryPools between VMs to share cached memory (it is thread-safe).
  std::shared_ptr<MemoryPools> pools;
  // Most bytes each device's pool may hold (in use + cached) when the VM makes
  // its own pools; 0: the machine's (hostMemoryLimit() for the host). Exceeding
  // it is a kiln::Error naming the device. A VM that forks (see "Forks") makes a
  // second set for the VM running its forks, with the same limit.
  uint64_t memoryLimit = 0;
  // Dynamic batching (vm/row_batcher.h): calls of a kernel over one-row tensors
  // with the same weights (a tree's nodes, reduced by recursion) are deferred and
  // those that do not depend on one another run as one call over their rows
  // stacked, within float tolerance of running them one by one. Off: every
  // kernel runs when its instruction does. Profiling and memory tracing turn it
  // off, as they time and trace each call where it is made.
  bool rowBatching = true;
  // Each invoke() may run this long; past it, it fails with a kiln::Error at its
  // next stop point ("Stopping a run" above). Zero: no limit. At most
  // kMaxTimeLimit (a longer one is a kiln::Error when the VM is made: its
  // deadline could overflow the clock). One process-wide thread keeps the
  // deadlines; an invoke without a limit never talks to it.
  std::chrono::nanoseconds timeLimit{0};
  static constexpr std::chrono::hours kMaxTimeLimit{24 * 366};
};

// Per-kernel run-time figures, collected when profiling is on. Kernels on a GPU
// count GPU time, measured with CUDA events around their launches.
struct KernelShapeProfile {
  uint64_t calls = 0;
  uint64_t totalNanos = 0;
};
struct KernelProfile {
  uint64_t calls = 0;
  uint64_t totalNanos = 0;
  // With enableShapeRecording(): the same figures by the inputs' shapes
  // ("1x128;1024x128": `;` between inputs, `x` between dimensions, "scalar" for rank 0).
  std::map<std::string, KernelShapeProfile> byShape;
};

// One span of a Chrome trace: a kernel call or a top-level invocation.
struct TraceEvent {
  std::string name;
  uint64_t startNanos = 0;  // since the VM was created
  uint64_t durationNanos = 0;
};

// Memory the VM allocated for tensors, for --stats: its own requests, and the
// figures of each device's pool (shared with other VMs when the pools are).
struct VMMemoryStats {
  uint64_t allocations = 0;     // storage blocks and tensors requested
  uint64_t bytesAllocated = 0;  // bytes requested, before size-class rounding
  std::vector<PoolStats> pools;
};

class VirtualMachine {
 public:
  explicit VirtualMachine(std::shared_ptr<const Executable> exe, VMOptions options = {});
  ~VirtualMachine();
  VirtualMachine(const VirtualMachine&) = delete;
  VirtualMachine& operator=(const VirtualMachine&) = delete;

  // Calls a function by name. Arguments are checked against its parameter types
  // (count, dtype, rank, static dimensions); errors name the parameter.
  Value invoke(std::string_view function, std::span<const Value> args);
  Value invoke(std::string_view function, std::initializer_list<Value> args) {
    return invoke(function, std::span<const Value>(args.begin(), args.size()));
  }

  // `v` with every tensor copied to `device` (the host by default): results
  // computed on a GPU are copied back this way to be printed or saved. A 0-d
  // tensor stays a tensor.
  Value copyTo(const Value& v, Device device = {});

  // Makes the invoke() running now fail at its next stop point ("Stopping a
  // run" above). Thread-safe, and meant for another thread (a watchdog, a
  // server's cancel). A request made while no invoke runs is dropped when the
  // next one starts.
  void requestStop() noexcept { stop_.store(kStopRequested, std::memory_order_relaxed); }

  // The argument check invoke() does, on its own (throws kiln::Error).
  void checkArguments(std::string_view function, std::span<const Value> args) const;

  const Executable& executable() const { return *exe_; }
  // Start-up, for --stats: the time this VM's construction spent making the
  // executable's kernels (the Runtime's compile on load, when this VM was the
  // first over the executable), and the first invoke()'s time (-1 before one).
  double kernelsMillis() const { return kernelsMillis_; }
  double firstRunMillis() const { return firstRunMillis_; }
  Runtime& runtime() const { return *runtime_; }
  // Whether kernel `k` has run (been bound) on any device in this VM.
  bool kernelCompiled(uint32_t k) const;

  // Profiling: per-kernel calls and time; with `trace`, also one event per kernel call.
  void enableProfiling(bool trace = false);
  const std::vector<KernelProfile>& kernelProfile() const { return profile_; }
  // Profiling that also keeps each kernel's calls and time by input shapes
  // (KernelProfile::byShape): what `vmrun --record-shapes` saves for the tuner.
  void enableShapeRecording();
  const std::vector<TraceEvent>& trace() const { return trace_; }
  // The requests of the VM running this VM's forks count with its own; where
  // that VM has pools of its own, so do their figures: each pool's bytes, hits
  // and misses added to this VM's pool of that device, and its peaks too,
  // which makes them an upper bound (the two peaks may have come at different
  // times).
  VMMemoryStats memoryStats() const;
  // Calls a fork ran on another thread since the VM was made.
  uint64_t forksRun() const { return forksRun_; }
  // Since the VM was made: kernel calls run in batches over stacked rows
  // (VMOptions::rowBatching), and the batches they made.
  uint64_t rowBatchedCalls() const;
  uint64_t rowBatches() const;

  // Records tensor births and reads in each invoke() (a little slower), so that
  // livenessLowerBound() can say, per device, the largest total of tensor bytes
  // the last run needed live at once: what an ideal memory manager would hold.
  void enableMemoryTrace();
  std::vector<std::pair<Device, uint64_t>> livenessLowerBound() const;

 private:
  struct Frame {
    uint32_t function;
    uint32_t returnPc;
    uint32_t base;
    uint32_t dst;  // caller's register for the result
  };
  Value run(uint32_t function, std::span<const Value> args);
  // Forks (vm/fork.cc). mayFork: whether the fork at `site` may go to another
  // thread (false: the caller runs it as an invoke, views and all). startFork,
  // after mayFork: starts a fork of `callee` on `args` (taken, owned) whose
  // result goes to register `reg` (absolute) when joined; false when the pool is
  // busy: the arguments are back in `args` and the caller runs it.
  struct PendingFork;
  bool mayFork(uint64_t site);
  bool startFork(uint32_t callee, std::span<Value> args, uint32_t reg, uint64_t site);
  // The fork's result, or its error thrown; the fork is over either way.
  Value joinFork();
  // Whether a fork is in flight with its result for register `reg`.
  bool forkPending(uint32_t reg) const;
  // After an error or at the end of a run: waits for a fork still in flight,
  // keeping its error, if any, for invoke() to report.
  void settleFork() noexcept;
  void checkArgs(const BytecodeFunction& f, std::span<const Value> args) const;
  // Why a run stops: kStopRequested (requestStop) or kStopTimeLimit. The
  // interpreter reads `stopSource_` at each stop point: this VM's own word, or,
  // in the VM running its forks, the forking VM's (forked calls stop with it).
  static constexpr uint8_t kStopRequested = 1, kStopTimeLimit = 2;
  [[noreturn]] void stopped(uint8_t why) const;
  void resetStacks();
  uint64_t nowNanos() const;

  std::shared_ptr<const Executable> exe_;
  VMOptions options_;
  std::vector<Value> regs_;
  std::vector<Frame> frames_;
  // Slow path of load_const for devices other than cpu:0.
  const Value& constantOn(uint32_t index, uint32_t encodedDevice);

  std::shared_ptr<Runtime> runtime_;
  std::vector<Value> constants_;                       // executable constants as values (cpu)
  std::unordered_map<uint64_t, Value> deviceConstants_;  // (constant, device) -> copy on that device
  std::unique_ptr<vm::BoundKernels> kernels_;          // into the runtime's kernel table
  std::unique_ptr<vm::RowBatcher> batcher_;            // null: options_.rowBatching off
  bool profiling_ = false, tracing_ = false, recordingShapes_ = false;
  std::vector<KernelProfile> profile_;
  std::vector<TraceEvent> trace_;
  std::chrono::steady_clock::time_point epoch_;
  double kernelsMillis_ = 0, firstRunMillis_ = -1;
  std::unique_ptr<vm::TensorMemory> memory_;
  std::unique_ptr<vm::MemoryTrace> memoryTrace_;
  std::unique_ptr<vm::GpuStreams> streams_;  // one per GPU this VM runs on
  std::unique_ptr<PendingFork> fork_;        // made at the first fork
  // Whether a fork can ever go to another thread: the Runtime has a pool of two
  // or more (fixed for its life). Otherwise a fork is an invoke from the start.
  bool forksPossible_ = false;
  uint64_t forksRun_ = 0;
  std::atomic<uint8_t> stop_{0};
  const std::atomic<uint8_t>* stopSource_ = &stop_;
};

}  // namespace kiln
