// A fork in flight: the call a `fork` instruction handed to a worker of the
// Runtime's pool, run there in a VM of its own (see kiln/vm.h, "Forks").
//
// Ownership: the forking VM owns its PendingFork (made at its first fork and
// kept) and, through it, the child VM that runs forked calls. While `active`,
// the worker (or the forking thread, if no worker claimed the task) owns
// `args`, `result`, `error`, `where` and `nanos`; the forking thread reads them
// only after ThreadPool::join() returns, which orders the two.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "kiln/vm.h"

namespace kiln {

namespace device {
class ThreadPool;
}

struct VirtualMachine::PendingFork {
  std::unique_ptr<VirtualMachine> child;  // made at the first fork: same executable, runtime and pools
  device::ThreadPool* pool = nullptr;
  void* taskBuffers[1] = {this};  // what the pool hands task(): read when a worker claims it
  bool active = false;
  uint32_t function = 0;
  std::vector<Value> args;
  uint32_t reg = 0;    // the forking frame's result register, absolute (regs_ may move)
  uint64_t site = 0;   // function << 32 | pc of the fork
  Value result;
  std::exception_ptr error;  // the forked call's failure, if it failed
  std::string where;         // the innermost function of the child when it failed
  uint64_t nanos = 0;        // the forked call's time
  // A fork that failed while the forking VM was unwinding from an error of its
  // own: reported instead (it comes first in program order).
  std::exception_ptr abandonedError;
  // Forks at a site whose last forked call was short run inline this many more times.
  std::unordered_map<uint64_t, uint32_t> inlineLeft;
  bool hostOnly = false;  // the executable runs on the host alone (forks stay off GPUs)

  // Runs the call in `child`, keeping its result or error (never throws).
  void childRun() noexcept;
  // The pool task (ThreadPool::start): childRun of the PendingFork in buffers[0], timed.
  static void task(void* const* buffers, const int64_t*, int64_t, int64_t);
};

// The error of a forked call, rethrown by the forking VM: `where` is the
// function that failed inside the fork, as the error of a plain call would name.
struct ForkedError : Error {
  ForkedError(std::string where, const std::string& message) : Error(message), where(std::move(where)) {}
  std::string where;
};

}  // namespace kiln
