// A small fork-join pool: persistent workers, one job at a time, static chunks.
#include "jit/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::jit {

namespace {

// Below this many elements of work a kernel runs on its caller's thread alone.
constexpr int64_t kMinParallelWork = 1 << 15;

thread_local bool tInTask = false;
std::atomic<int64_t> gJobsRun{0};

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
    size_ = threads;
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int size() const { return size_; }

  // False if the pool is busy (the caller then runs the job itself).
  bool run(int64_t n, ParallelTask task, void* const* buffers, const int64_t* shapes) {
    std::unique_lock<std::mutex> busy(jobMu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = Job{n, task, buffers, shapes};
      pending_ = size_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    runChunk(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    return true;
  }

 private:
  struct Job {
    int64_t n = 0;
    ParallelTask task = nullptr;
    void* const* buffers = nullptr;
    const int64_t* shapes = nullptr;
  };

  void runChunk(int index) {
    int64_t chunk = (job_.n + size_ - 1) / size_;
    int64_t begin = std::min<int64_t>(job_.n, chunk * index), end = std::min<int64_t>(job_.n, begin + chunk);
    if (begin < end) {
      tInTask = true;
      job_.task(job_.buffers, job_.shapes, begin, end);
      tInTask = false;
    }
  }

  void workerLoop(int index) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
      }
      runChunk(index);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  int size_ = 1;
  std::mutex jobMu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  Job job_;
};

int defaultThreads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1 && n <= 1024) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::mutex gPoolMu;
std::shared_ptr<ThreadPool> gPool;
int gThreads = 0;

std::shared_ptr<ThreadPool> pool() {
  std::lock_guard<std::mutex> lock(gPoolMu);
  if (gThreads == 0) gThreads = defaultThreads();
  if (!gPool || gPool->size() != gThreads) gPool = std::make_shared<ThreadPool>(gThreads);
  return gPool;
}

}  // namespace

int numThreads() {
  std::lock_guard<std::mutex> lock(gPoolMu);
  return gThreads == 0 ? defaultThreads() : gThreads;
}

void setNumThreads(int n) {
  std::lock_guard<std::mutex> lock(gPoolMu);
  gThreads = std::max(1, n);
}

int64_t parallelJobsRun() { return gJobsRun.load(std::memory_order_relaxed); }

void parallelFor(int64_t n, int64_t work, ParallelTask task, void* const* buffers, const int64_t* shapes) {
  if (n <= 0) return;
  if (n > 1 && work >= kMinParallelWork && !tInTask) {
    std::shared_ptr<ThreadPool> p = pool();
    if (p->size() > 1 && p->run(n, task, buffers, shapes)) {
      gJobsRun.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  task(buffers, shapes, 0, n);
}

}  // namespace kiln::jit

extern "C" void kiln_parallel_for(int64_t n, int64_t work, kiln::jit::ParallelTask task, void* const* buffers,
                                  const int64_t* shapes) {
  kiln::jit::parallelFor(n, work, task, buffers, shapes);
}
