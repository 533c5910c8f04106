// Forks: a pure call run on another thread beside its caller (kiln/vm.h, "Forks").
#include "vm/fork.h"

#include <algorithm>
#include <chrono>
#include <new>

#include "device/thread_pool.h"
#include "vm/memory.h"

namespace kiln {

namespace {

// A forked call shorter than this did not pay for the fork (a pool hand-off
// and a second VM's entry, 1-2 us): the next calls there run inline. At 20 us,
// the bar of a slower host, model_bench's 64-leaf tree on an AVX-512 Zen 5
// guest, whose halves take 15-18 us there, forked once in 65 runs and took a
// median of 36.3 us on two threads (35.9 on one); at 5 us, 21.9 us.
constexpr uint64_t kWorthForkingNanos = 5'000;
// How many calls at such a site run inline before one is forked again.
constexpr uint32_t kInlineAfterShortFork = 64;

uint64_t nanosSince(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

// On whichever thread claimed it: a worker, or the forking thread at its join.
void VirtualMachine::PendingFork::task(void* const* buffers, const int64_t*, int64_t, int64_t) {
  auto* f = static_cast<PendingFork*>(buffers[0]);
  auto t0 = std::chrono::steady_clock::now();
  f->childRun();
  f->nanos = nanosSince(t0);
}

bool VirtualMachine::mayFork(uint64_t site) {
  // Inside a pool task (a forked call itself) nothing can start: checked first,
  // so a fork's own VM never makes one of its own.
  if (device::inPoolTask() || profiling_ || memoryTrace_ || (fork_ && fork_->active)) return false;
  device::ThreadPool* pool = runtime_->threadPool();
  if (!pool || pool->size() < 2) return false;
  if (!fork_) {
    fork_ = std::make_unique<PendingFork>();
    fork_->hostOnly = std::all_of(exe_->devices().begin(), exe_->devices().end(), [](const Device& d) { return d == Device{}; });
  }
  PendingFork& f = *fork_;
  if (!f.hostOnly) return false;
  if (auto it = f.inlineLeft.find(site); it != f.inlineLeft.end() && it->second > 0) {
    --it->second;
    return false;
  }
  return true;
}

bool VirtualMachine::startFork(uint32_t callee, std::span<Value> args, uint32_t reg, uint64_t site) {
  PendingFork& f = *fork_;
  device::ThreadPool* pool = runtime_->threadPool();
  if (!f.child) {
    // Where this VM made its own pools, its fork's VM makes its own too (with
    // the same limit): two threads allocating at once then never take turns at
    // one pool's lock, as a tree's nodes on both sides of a fork did (4 us of a
    // 28 us run). Pools the caller shares stay shared, fork included.
    VMOptions o = options_;
    o.runtime = runtime_;
    f.child = std::make_unique<VirtualMachine>(exe_, o);
    // A forked call stops when this VM's run does (and so on down its own forks).
    f.child->stopSource_ = stopSource_;
  }
  // The fork's frames count with the forking VM's toward the depth limit.
  f.child->options_.maxCallDepth = options_.maxCallDepth > frames_.size() ? options_.maxCallDepth - frames_.size() : 1;
  f.function = callee;
  f.args.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  f.reg = reg;
  f.site = site;
  f.result = Value();
  f.error = nullptr;
  f.where.clear();
  f.pool = pool;
  if (!pool->start(PendingFork::task, f.taskBuffers)) {
    // Busy: the caller runs it (the arguments go back where it expects them).
    for (size_t i = 0; i < args.size(); ++i) args[i] = std::move(f.args[i]);
    f.args.clear();
    return false;
  }
  f.active = true;
  return true;
}

void VirtualMachine::PendingFork::childRun() noexcept {
  try {
    result = child->run(function, args);
  } catch (const Error& e) {
    where = child->frames_.empty() ? child->exe_->functions()[function].name
                                   : child->exe_->functions()[child->frames_.back().function].name;
    error = std::make_exception_ptr(ForkedError(where, e.message()));
  } catch (const std::bad_alloc&) {
    error = std::make_exception_ptr(ForkedError(child->exe_->functions()[function].name, "out of memory"));
  } catch (...) {
    error = std::current_exception();
  }
  child->resetStacks();
  args.clear();
}

bool VirtualMachine::forkPending(uint32_t reg) const { return fork_ && fork_->active && fork_->reg == reg; }

Value VirtualMachine::joinFork() {
  PendingFork& f = *fork_;
  f.pool->join();
  f.active = false;
  ++forksRun_;
  if (f.nanos < kWorthForkingNanos) f.inlineLeft[f.site] = kInlineAfterShortFork;
  if (f.error) {
    std::exception_ptr e = f.error;
    f.error = nullptr;
    std::rethrow_exception(e);
  }
  return std::move(f.result);
}

void VirtualMachine::settleFork() noexcept {
  if (!fork_ || !fork_->active) return;
  PendingFork& f = *fork_;
  f.pool->join();
  f.active = false;
  f.abandonedError = f.error;
  f.error = nullptr;
  f.result = Value();
}

}  // namespace kiln
