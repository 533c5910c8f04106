// The deadlines of running invokes (VMOptions::timeLimit): one process-wide
// thread that sets a VM's stop word when its run's time is up.
//
// Ownership and threads: an invoke with a time limit holds a RunDeadline for its
// run. The constructor files (deadline, word) with the watch; the destructor
// takes it out, under the watch's lock, so the watch never stores to a word
// after the invoke that filed it has returned or thrown (a deadline that came
// is taken out by the watch itself, after its one store). The watch's thread
// starts at the first deadline filed and is joined at process exit. Invokes
// without a limit never touch any of it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kiln::vm {

class RunDeadline {
 public:
  // Stores `why` to `word` (relaxed) at `after` from now, unless destroyed first.
  RunDeadline(std::chrono::nanoseconds after, std::atomic<uint8_t>* word, uint8_t why);
  ~RunDeadline();
  RunDeadline(const RunDeadline&) = delete;
  RunDeadline& operator=(const RunDeadline&) = delete;

 private:
  std::chrono::steady_clock::time_point when_;
  uint64_t id_;
};

}  // namespace kiln::vm
