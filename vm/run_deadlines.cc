// The process-wide watch over invokes' time limits (vm/run_deadlines.h).
#include "vm/run_deadlines.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace kiln::vm {

namespace {

using Clock = std::chrono::steady_clock;

class DeadlineWatch {
 public:
  static DeadlineWatch& instance() {
    static DeadlineWatch watch;
    return watch;
  }

  uint64_t add(Clock::time_point when, std::atomic<uint8_t>* word, uint8_t why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    uint64_t id = next_++;
    byTime_.emplace(std::make_pair(when, id), Entry{word, why});
    wake_.notify_one();
    return id;
  }

  void remove(uint64_t id, Clock::time_point when) {
    std::lock_guard<std::mutex> lock(mu_);
    byTime_.erase(std::make_pair(when, id));
  }

  ~DeadlineWatch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Entry {
    std::atomic<uint8_t>* word;
    uint8_t why;
  };

  // Sleeps until the earliest deadline (or a new, earlier one), then stops
  // every run whose time is up and takes its entry out, so each word is stored
  // to once (the invoke's own removal then finds nothing).
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      Clock::time_point now = Clock::now();
      for (auto it = byTime_.begin(); it != byTime_.end() && it->first.first <= now;) {
        it->second.word->store(it->second.why, std::memory_order_relaxed);
        it = byTime_.erase(it);
      }
      if (byTime_.empty()) {
        wake_.wait(lock);
        continue;
      }
      // A copy: the entry may be taken out while this thread waits (its
      // invoke ended), and wait_until reads the time again when it wakes.
      Clock::time_point next = byTime_.begin()->first.first;
      wake_.wait_until(lock, next);
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::pair<Clock::time_point, uint64_t>, Entry> byTime_;
  uint64_t next_ = 1;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace

RunDeadline::RunDeadline(std::chrono::nanoseconds after, std::atomic<uint8_t>* word, uint8_t why)
    : when_(Clock::now() + after), id_(DeadlineWatch::instance().add(when_, word, why)) {}

RunDeadline::~RunDeadline() { DeadlineWatch::instance().remove(id_, when_); }

}  // namespace kiln::vm
