// Thread pools that run kernels' outer loops in parallel.
//
// A ThreadPool is a set of persistent workers (the caller is one of them).
// parallelFor splits [0, n) into a few contiguous pieces per thread, which the
// caller and the workers claim one at a time (so a thread the machine runs late
// costs a piece, not a share); it returns when all are done. An affine loop has
// one piece per thread instead, piece t offered to thread t first, so that a
// kernel called again gives each thread the same part (a weight-streaming
// product then finds its share of the weights in its own core's cache). Idle
// workers spin for 200 us before sleeping, so kernels (and forks) in quick
// succession do not pay a wake-up each. Workers are pinned each to a CPU of
// their own, never the one their caller is on (re-pinned when the caller
// moves): a worker sharing its caller's CPU made two threads slower than one.
//
// A VM's fork (two independent calls at once) uses start/join: one task beside
// its caller rather than a loop split among all.
//
// Contention: a pool runs one job at a time. A parallelFor issued while the pool
// is busy (another thread's kernel, or a kernel inside a task) runs inline on its
// caller, so nothing blocks or deadlocks; ThreadPoolStats::busyInline counts
// those, so an app sharing one pool among many VMs can see it happen.
//
// Kernels reach a pool through the C entry point kiln_parallel_for, which uses
// the calling thread's current pool (ThreadPoolScope; a VM installs its
// Runtime's during invoke) or else the process default pool (one thread per core,
// or KILN_NUM_THREADS; setNumThreads resizes it). Every member is thread-safe.
#pragma once

#include <cstdint>
#include <memory>

namespace kiln::device {

using ParallelTask = void (*)(void* const* buffers, const int64_t* shapes, int64_t begin, int64_t end);

struct ThreadPoolStats {
  int threads = 1;
  int64_t shared = 0;      // parallelFor calls shared out among the threads
  int64_t busyInline = 0;  // calls large enough to share that ran inline: the pool was busy
  int64_t started = 0;     // tasks start() handed to a worker
};

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // clamped to [1, 1024]
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  ThreadPoolStats stats() const;
  // Runs task over [0, n), in parallel when `work` (an estimate of the total
  // element count) is large enough to gain; otherwise inline.
  // affine: one piece per thread, and piece t offered to thread t first (the
  // caller is thread 0), so repeated calls give each thread the same part: for
  // kernels that stream data a core can keep in its own cache between calls.
  void parallelFor(int64_t n, int64_t work, ParallelTask task, void* const* buffers, const int64_t* shapes,
                   bool affine = false);

  // One task beside the caller: task(buffers, nullptr, 0, 1) is offered to a
  // worker and start returns at once, true; the caller goes on with other work
  // and must then call join() (on the same thread), which returns when the task
  // has run: on the worker that claimed it, or, if none had yet, on the caller
  // itself. Until join, the pool is busy: loops issued meanwhile, by anyone, run
  // inline on their callers (the task's own loops run inline too). False, and
  // nothing started, when the pool is busy, has one thread, or the caller is
  // itself running a pool task (the caller then runs the task itself).
  bool start(ParallelTask task, void* const* buffers);
  void join();

  // The process default pool (its size from numThreads()).
  static std::shared_ptr<ThreadPool> processDefault();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Makes `pool` the calling thread's current pool until destroyed (scopes nest).
class ThreadPoolScope {
 public:
  explicit ThreadPoolScope(ThreadPool* pool);
  ~ThreadPoolScope();
  ThreadPoolScope(const ThreadPoolScope&) = delete;
  ThreadPoolScope& operator=(const ThreadPoolScope&) = delete;

 private:
  ThreadPool* previous_;
};

// The process default pool's size, and a new size for it.
int numThreads();
void setNumThreads(int n);  // 1 disables parallelism; takes effect for later calls
// Threads a parallelFor from this thread would use now: the current pool's, or
// the default's (how a kernel sizes its tasks).
int currentThreads();

// On the calling thread's current pool, or the process default pool.
void parallelFor(int64_t n, int64_t work, ParallelTask task, void* const* buffers, const int64_t* shapes,
                 bool affine = false);

// Below this much work (elements touched, as kiln_parallel_for's `work`) a loop
// runs on its caller's thread alone. Code generators emit a loop whose work is a
// compile-time constant below it as a plain loop: no task function, no call.
constexpr int64_t kMinParallelWork = 1 << 15;

// While one lives, parallelFor on this thread runs every loop inline: what a
// kernel whose schedule shares nothing (loop::Schedule::parallel) asks for
// around a runtime GEMM or convolution. Scopes nest.
class SerialScope {
 public:
  explicit SerialScope(bool serial = true);
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool previous_;
};

// While one lives (with a shift other than 0), parallelFor on this thread
// shares only loops of at least kMinParallelWork * 2^shift work: the grain a
// kernel's schedule chose (loop::Schedule::grainShift), around a runtime GEMM or
// convolution, whose work estimates the JIT does not see. Scopes nest; the
// innermost's grain holds. A shift of 0 touches nothing.
class GrainScope {
 public:
  explicit GrainScope(int shift);
  ~GrainScope();
  GrainScope(const GrainScope&) = delete;
  GrainScope& operator=(const GrainScope&) = delete;

 private:
  bool active_;
  int64_t previous_ = 0;
};
// Runs `f` under a SerialScope and a GrainScope when they would change anything:
// most runtime GEMM and convolution calls ask for neither, and then pay no
// thread-local writes (four out-of-line calls each).
template <class F>
void underScopes(bool serial, int grainShift, F&& f) {
  if (!serial && grainShift == 0) {
    f();
    return;
  }
  SerialScope s(serial);
  GrainScope g(grainShift);
  f();
}
constexpr int kMaxGrainShift = 24;  // kMinParallelWork << 24 still fits int64 comfortably

// A grain shift in a runtime entry point's flags (bits 25-30, two's complement),
// as the JIT passes it to the GEMM and convolution entry points.
constexpr int kGrainFlagShift = 25;
constexpr int64_t grainFlags(int shift) { return (int64_t(shift) & 0x3f) << kGrainFlagShift; }
constexpr int grainFromFlags(int64_t flags) {
  int v = static_cast<int>((flags >> kGrainFlagShift) & 0x3f);
  return v >= 32 ? v - 64 : v;
}

// Whether the calling thread is running a pool task now (its loops run inline,
// and it cannot start() another).
bool inPoolTask();

// How many parallelFor calls the pool has shared out since the process started
// (the rest ran inline): what a test or a profile reads to see kernels go wide.
int64_t parallelJobsRun();

}  // namespace kiln::device

extern "C" void kiln_parallel_for(int64_t n, int64_t work, kiln::device::ParallelTask task, void* const* buffers,
                                  const int64_t* shapes);
