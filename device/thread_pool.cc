// A small fork-join pool: persistent workers, one job at a time, pieces claimed dynamically.
#include "device/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::device {

namespace {

thread_local bool tInTask = false;
// Set by SerialScope: this thread's parallel loops run inline.
thread_local bool tSerial = false;
// Set by GrainScope: the least work this thread shares, kMinParallelWork scaled.
thread_local int64_t tMinWork = kMinParallelWork;
std::atomic<int64_t> gJobsRun{0};

// Workers that have just finished a job spin for a while before sleeping, and so
// does a caller waiting for its job's last chunk: kernels come in quick
// succession (a model's layers), and a condition-variable wake-up costs tens of
// microseconds on a virtual machine, as much as a small kernel. OpenMP runtimes
// do the same (KMP_BLOCKTIME, 200 ms by default). At 50 us a program that forks
// every 40-55 us (a 64-leaf tree run again and again, each run's halves on two
// threads) fell into a stable bad state: the worker had just gone to sleep at
// each fork, woke too late to claim it, the caller ran both halves (55 us), and
// the worker slept again before the next; half its runs did, median 60 us
// against 37-40. At 200 us: 39-43 us.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

template <class Ready>
bool spinUntil(Ready&& ready) {
  auto until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

class Workers {
 public:
  explicit Workers(int threads) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) cpus_.push_back(c);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
    // A pool is whole when made: every worker has started. A process that exits
    // right after making one then never has a thread half-created at exit, which
    // LeakSanitizer's exit-time scan of every thread's TLS could not read.
    while (started_.load(std::memory_order_acquire) < threads - 1) std::this_thread::yield();
    size_ = threads;
    pin(sched_getcpu());
  }

  // Workers are pinned each to a CPU of their own, none of them the caller's.
  // Unpinned, a worker woken by the caller is often placed on the caller's own
  // CPU (the scheduler's wake-affine choice) and spins there beside it for
  // milliseconds; pinned to the CPU the caller happens to be on, the two share
  // it until the scheduler moves the caller, which it may not do for a long
  // time. Either way a two-thread kernel ran slower than one. So a job from a
  // caller on another CPU than the last one re-pins the workers around it: a
  // system call, but only when the caller has moved.
  void pin(int callerCpu) {
    if (callerCpu == pinnedAround_ || static_cast<int>(cpus_.size()) < size_) return;
    pinnedAround_ = callerCpu;
    size_t next = 0;
    for (auto& w : workers_) {
      if (cpus_[next] == callerCpu) ++next;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus_[next % cpus_.size()], &one);
      pthread_setaffinity_np(w.native_handle(), sizeof one, &one);
      ++next;
    }
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int size() const { return size_; }

  // False if the pool is busy (the caller then runs the job itself).
  bool run(int64_t n, ParallelTask task, void* const* buffers, const int64_t* shapes, bool affine) {
    if (!acquire()) return false;
    uint32_t gen = publish(n, task, buffers, shapes, affine);
    work(gen, 0);
    finish();
    return true;
  }

  // Starts a one-piece job for a worker to claim, the caller not taking part;
  // false if the pool is busy. The pool stays busy (parallelFor from anywhere
  // runs inline) until the same thread calls join().
  bool start(ParallelTask task, void* const* buffers) {
    if (size_ < 2 || !acquire()) return false;
    started_gen_ = publish(1, task, buffers, nullptr, false);
    return true;
  }
  // Waits for the started job; runs it here if no worker has claimed it yet (a
  // worker asleep, or every core busy elsewhere), so a join never waits on a
  // piece nobody runs.
  void join() {
    work(started_gen_, 0);
    finish();
  }

 private:
  // The pool is one job's at a time: taken by a compare-and-swap, not a mutex,
  // because a started job holds it while its caller goes on (and may itself ask
  // for the pool: it is then busy, and the loop runs inline).
  bool acquire() {
    bool expected = false;
    return busy_.compare_exchange_strong(expected, true, std::memory_order_acquire, std::memory_order_relaxed);
  }

  // Sets up job n/task and publishes it to the workers; returns its generation.
  uint32_t publish(int64_t n, ParallelTask task, void* const* buffers, const int64_t* shapes, bool affine) {
    affine = affine && size_ <= kMaxAffineThreads;
    pin(sched_getcpu());  // while busy_: one caller at a time
    uint32_t gen = static_cast<uint32_t>(generation_.load(std::memory_order_relaxed) + 1);
    // The claim word moves to the new generation *first*: a thread still in the
    // last job's work() may hold that job's claim word (an affine job's holds a
    // bitmask), and until this store its CAS on it would succeed; had affine_ or
    // pieces_ already changed, it would take a piece of the new job under the old
    // generation and count it twice (a lost job: the caller then waited forever).
    // From here its CAS fails. It reads affine_ and pieces_ with acquire, so
    // seeing their new values means this store is visible to its CAS too.
    claim_.store(uint64_t(gen) << 32, std::memory_order_release);
    job_ = Job{n, task, buffers, shapes};
    donePieces_.store(0, std::memory_order_relaxed);
    affine_.store(affine, std::memory_order_release);
    pieces_.store(std::min<int64_t>(n, affine ? size_ : int64_t(kPiecesPerThread) * size_), std::memory_order_release);
    // Publishes the job to spinning workers. The mutex and the wake-up are for
    // sleeping ones only: a job's round trip moves cache lines between cores,
    // and the mutex's line (taken by a worker that finished last) was two more
    // moves on every job. A worker counts itself in sleepers_ before its last
    // look at the generation (under the mutex), and this reads sleepers_ after
    // the increment, all four accesses sequentially consistent: one of the two
    // sees the other. (No fences: ThreadSanitizer does not model them.)
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(mu_); }
      wake_.notify_all();
    }
    return gen;
  }

  // Waits until every piece of the job is done, then frees the pool. A worker
  // that wakes late finds nothing left to claim, and nobody waits for it.
  void finish() {
    int64_t pieces = pieces_.load(std::memory_order_relaxed);
    // Sequentially consistent (a plain load on x86), for the sleeping path below.
    auto finished = [&] { return donePieces_.load(std::memory_order_seq_cst) == pieces; };
    if (!spinUntil(finished)) {
      std::unique_lock<std::mutex> lock(mu_);
      callerAsleep_.store(true, std::memory_order_seq_cst);  // before the predicate's last look: see work()
      done_.wait(lock, finished);
      callerAsleep_.store(false, std::memory_order_relaxed);
    }
    busy_.store(false, std::memory_order_release);
  }

  // Pieces per thread: more than one, so a thread the machine runs late (another
  // tenant, a core busy elsewhere) costs a piece, not a whole share.
  static constexpr int kPiecesPerThread = 4;

  struct Job {
    int64_t n = 0;
    ParallelTask task = nullptr;
    void* const* buffers = nullptr;
    const int64_t* shapes = nullptr;
  };
  // Affine jobs keep a bit per piece in the claim word.
  static constexpr int kMaxAffineThreads = 32;

  // Claims and runs pieces of job `gen` until none is left. A claim is a CAS on
  // (generation, next piece), so a thread still holding an old generation can
  // never take (or read the job of) a newer one; job_ and pieces_ stay fixed
  // while any piece of their job is unfinished. (pieces_ is atomic because a
  // thread late from an old job may read it as the next job is set up; its CAS
  // then fails on the new generation.)
  // An affine job's claim word holds a bit per claimed piece: thread `self`
  // takes piece `self` when it is still free, so the same thread runs the same
  // part of a kernel call after call (a weight-streaming product then finds its
  // share of the weights in its own L2), and otherwise any free piece, so a late
  // thread still costs only its own piece.
  bool claimAffine(uint32_t gen, int self, int64_t& piece, int64_t& pieces) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      pieces = pieces_.load(std::memory_order_acquire);
      if (static_cast<uint32_t>(c >> 32) != gen) return false;
      uint32_t taken = static_cast<uint32_t>(c);
      if (self < pieces && !(taken >> self & 1u)) {
        piece = self;
      } else {
        piece = -1;
        for (int64_t p = 0; p < pieces; ++p)
          if (!(taken >> p & 1u)) {
            piece = p;
            break;
          }
        if (piece < 0) return false;
      }
      if (claim_.compare_exchange_weak(c, c | (uint64_t(1) << piece), std::memory_order_acq_rel, std::memory_order_acquire))
        return true;
    }
  }

  void work(uint32_t gen, int self) {
    for (;;) {
      uint64_t c = claim_.load(std::memory_order_acquire);
      int64_t piece, pieces;
      // affine_ belongs to job `gen` once the claim word says `gen` (both are set
      // before the generation is published); a late thread sees another
      // generation and leaves.
      if (static_cast<uint32_t>(c >> 32) == gen && affine_.load(std::memory_order_acquire)) {
        if (!claimAffine(gen, self, piece, pieces)) return;
      } else {
        do {
          piece = static_cast<int64_t>(c & 0xffffffffu);
          pieces = pieces_.load(std::memory_order_acquire);
          if (static_cast<uint32_t>(c >> 32) != gen || piece >= pieces) return;
        } while (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire));
      }
      int64_t begin = job_.n * piece / pieces, end = job_.n * (piece + 1) / pieces;
      tInTask = true;
      job_.task(job_.buffers, job_.shapes, begin, end);
      tInTask = false;
      // The last piece wakes a sleeping caller, under the mutex so that a caller
      // between its check and its wait still hears it; a spinning one sees the
      // count. (Sequentially consistent against finish's flag, as in publish.)
      if (donePieces_.fetch_add(1, std::memory_order_seq_cst) + 1 == pieces &&
          callerAsleep_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(mu_);
        done_.notify_one();
      }
    }
  }

  void workerLoop(int self) {
    started_.fetch_add(1, std::memory_order_release);
    uint64_t seen = 0;
    for (;;) {
      // Sequentially consistent (a plain load on x86), for the sleeping path below.
      auto fresh = [&] { return generation_.load(std::memory_order_seq_cst) != seen; };
      if (!spinUntil(fresh)) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);  // before the predicate's last look: see publish()
        wake_.wait(lock, fresh);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      work(static_cast<uint32_t>(seen), self);
    }
  }

  // Laid out by who writes what (64-byte lines): a job's round trip should move
  // as few lines between cores as it can. The caller's own state and the
  // sleepers' machinery first; then busy_, which callers take; then the job
  // line, written by the caller at publish and read (its claim word CAS'd) by
  // the workers; then the done count, written by the workers and read by the
  // waiting caller. Against the same members unaligned (they spread over lines
  // the job and the done count shared), an empty two-thread affine loop went
  // from 0.51-0.62 to 0.40-0.46 us on an Emerald Rapids Xeon guest (2 vCPUs), and
  // a worker started its piece 0.30 us after the call instead of 0.37.
  std::vector<std::thread> workers_;
  int size_ = 1;
  std::vector<int> cpus_;   // the CPUs this process may use
  int pinnedAround_ = -2;   // the caller CPU the workers were last pinned around (-2: never)
  uint32_t started_gen_ = 0;        // the job start() published, for join()
  std::mutex mu_;     // for the condition variables (sleepers and their wakers only)
  std::condition_variable wake_, done_;
  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0};
  std::atomic<int> sleepers_{0};         // workers asleep on wake_ (or about to be)
  alignas(64) std::atomic<bool> busy_{false};  // one job at a time (acquire)
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> claim_{0};  // (generation << 32) | next piece
  std::atomic<int64_t> pieces_{0};
  std::atomic<bool> affine_{false};  // the job's pieces are one per thread, offered to their own thread first
  Job job_;
  alignas(64) std::atomic<int64_t> donePieces_{0};
  std::atomic<bool> callerAsleep_{false};  // a caller asleep on done_ (or about to be)
  // (The alignment rounds the object up to whole lines: nothing after it shares the done line.)
};

// Read once: hardware_concurrency() is a system call, and kernels ask per call.
int defaultThreads() {
  static const int threads = [] {
    if (const char* env = std::getenv("KILN_NUM_THREADS")) {
      int n = std::atoi(env);
      if (n >= 1 && n <= 1024) return n;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return threads;
}

// The process default pool: rebuilt when setNumThreads changes its size.
std::mutex gPoolMu;
std::shared_ptr<ThreadPool> gPool;
std::atomic<int> gThreads{0};  // written under gPoolMu; read without it (kernels ask per call)
// Bumped (under gPoolMu) whenever gThreads changes, so that a thread's cached
// default pool (defaultPoolHere) knows to look again.
std::atomic<uint64_t> gPoolGeneration{0};

thread_local ThreadPool* tCurrent = nullptr;

// Whether a loop is worth sharing out: enough work, and not already inside a
// task (nested loops run inline, so a pool never waits on itself).
bool worthSharing(int64_t n, int64_t work) { return n > 1 && work >= tMinWork && !tInTask && !tSerial; }

}  // namespace

struct ThreadPool::State {
  explicit State(int threads) : workers(threads) {}
  Workers workers;
  std::atomic<int64_t> shared{0}, busyInline{0}, started{0};
};

ThreadPool::ThreadPool(int threads) : state_(std::make_unique<State>(std::clamp(threads, 1, 1024))) {}
ThreadPool::~ThreadPool() = default;

int ThreadPool::size() const { return state_->workers.size(); }

ThreadPoolStats ThreadPool::stats() const {
  return {size(), state_->shared.load(std::memory_order_relaxed), state_->busyInline.load(std::memory_order_relaxed),
          state_->started.load(std::memory_order_relaxed)};
}

void ThreadPool::parallelFor(int64_t n, int64_t work, ParallelTask task, void* const* buffers, const int64_t* shapes,
                             bool affine) {
  if (n <= 0) return;
  if (worthSharing(n, work) && size() > 1) {
    if (state_->workers.run(n, task, buffers, shapes, affine)) {
      state_->shared.fetch_add(1, std::memory_order_relaxed);
      gJobsRun.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    state_->busyInline.fetch_add(1, std::memory_order_relaxed);
  }
  task(buffers, shapes, 0, n);
}

bool ThreadPool::start(ParallelTask task, void* const* buffers) {
  if (tInTask || !state_->workers.start(task, buffers)) return false;
  state_->started.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ThreadPool::join() { state_->workers.join(); }

std::shared_ptr<ThreadPool> ThreadPool::processDefault() {
  std::lock_guard<std::mutex> lock(gPoolMu);
  if (gThreads.load() == 0) gThreads.store(defaultThreads());
  if (!gPool || gPool->size() != gThreads.load()) gPool = std::make_shared<ThreadPool>(gThreads.load());
  return gPool;
}

ThreadPoolScope::ThreadPoolScope(ThreadPool* pool) : previous_(tCurrent) { tCurrent = pool; }
ThreadPoolScope::~ThreadPoolScope() { tCurrent = previous_; }

int numThreads() {
  int n = gThreads.load(std::memory_order_relaxed);
  return n == 0 ? defaultThreads() : n;
}

int currentThreads() {
  if (tCurrent) return tCurrent->size();
  return numThreads();
}

void setNumThreads(int n) {
  std::lock_guard<std::mutex> lock(gPoolMu);
  gThreads.store(std::max(1, n));
  gPoolGeneration.fetch_add(1, std::memory_order_release);
}

bool inPoolTask() { return tInTask; }

int64_t parallelJobsRun() { return gJobsRun.load(std::memory_order_relaxed); }

namespace {

// The process default pool as this thread last found it: processDefault() takes
// a mutex and copies a shared_ptr, which every kernel call of a VM on the
// default Runtime (no pool of its own) paid. Looked up again when the thread
// count changes. Held through a pointer (the runtime's thread-locals use the
// initial-exec model: see jit/gemm_skinny.cc's StreamRecords); the cached
// reference keeps a replaced pool alive until this thread looks again or exits.
ThreadPool& defaultPoolHere() {
  struct Cached {
    std::shared_ptr<ThreadPool> pool;
    uint64_t generation = 0;
  };
  thread_local std::unique_ptr<Cached> cached;
  uint64_t generation = gPoolGeneration.load(std::memory_order_acquire);
  if (!cached) cached = std::make_unique<Cached>();
  if (!cached->pool || cached->generation != generation) {
    cached->pool = ThreadPool::processDefault();
    cached->generation = generation;
  }
  return *cached->pool;
}

}  // namespace

void parallelFor(int64_t n, int64_t work, ParallelTask task, void* const* buffers, const int64_t* shapes, bool affine) {
  if (n <= 0) return;
  // Small loops never touch a pool (the default one is found under a lock).
  if (!worthSharing(n, work)) {
    task(buffers, shapes, 0, n);
    return;
  }
  if (tCurrent) tCurrent->parallelFor(n, work, task, buffers, shapes, affine);
  else defaultPoolHere().parallelFor(n, work, task, buffers, shapes, affine);
}

SerialScope::SerialScope(bool serial) : previous_(tSerial) { tSerial = previous_ || serial; }
SerialScope::~SerialScope() { tSerial = previous_; }

GrainScope::GrainScope(int shift) : active_(shift != 0) {
  if (!active_) return;
  previous_ = tMinWork;
  shift = std::clamp(shift, -kMaxGrainShift, kMaxGrainShift);
  tMinWork = shift >= 0 ? kMinParallelWork << shift : kMinParallelWork >> -shift;
}
GrainScope::~GrainScope() {
  if (active_) tMinWork = previous_;
}

}  // namespace kiln::device

extern "C" void kiln_parallel_for(int64_t n, int64_t work, kiln::device::ParallelTask task, void* const* buffers,
                                  const int64_t* shapes) {
  kiln::device::parallelFor(n, work, task, buffers, shapes);
}
