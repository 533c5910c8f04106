// The emulated device's grid execution: a block's threads as fibers, barriers
// and warp-wide operations resolved between passes, checked memory accesses.
#include "device/emu_block.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

#include "device/emu_fiber.h"

namespace kiln::device {

namespace {

constexpr uint32_t kWarp = 32;
constexpr size_t kMaxBlockThreads = 1024;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kStackBytes = 512 << 10;  // instrumented frames are larger
#else
constexpr size_t kStackBytes = 128 << 10;
#endif

enum class Wait : uint8_t { None, Barrier, BarrierReduce, Warp, Done };
enum class WarpOp : uint8_t { Shuffle, Vote, Sync };

struct GpuThread {
  Fiber fiber;
  uint32_t tid[3] = {0, 0, 0};
  uint32_t linear = 0;
  Wait wait = Wait::None;
  WarpOp warpOp = WarpOp::Sync;
  uint32_t site = 0, mode = 0, mask = 0, value = 0, b = 0, c = 0;
  uint64_t result = 0;
};

// One host thread's emulation state: the fibers and stacks of its block (kept
// from launch to launch) and what the block being run needs.
struct Emulator {
  Fiber host;
  std::vector<std::unique_ptr<FiberStack>> stacks;
  std::vector<GpuThread> threads;
  std::vector<unsigned char> shared;
  size_t sharedBytes = 0;  // asked for by this block's code (0: not yet)
  alignas(64) unsigned char scratch[256];

  const EmuGrid* grid = nullptr;
  uint32_t ctaid[3] = {0, 0, 0};
  GpuThread* running = nullptr;
  const EmuAllocation* hit = nullptr;  // the allocation the last access found
  uint64_t invalidAccesses = 0;
  std::string report;  // the first problem
  bool divergence = false;
};

// Held through a pointer: the runtime library's thread-locals use the
// initial-exec model, whose static space a library opened by dlopen shares
// with every other such library (a Python extension's, for one).
Emulator& emulator() {
  thread_local std::unique_ptr<Emulator> e;
  if (!e) e = std::make_unique<Emulator>();
  return *e;
}

std::string dim3(const uint32_t* v) {
  return "(" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + ")";
}

std::string where(const Emulator& e, const GpuThread& t) {
  return "thread " + dim3(t.tid) + " of block " + dim3(e.ctaid);
}

void threadMain(void* arg) {
  Emulator& e = emulator();
  auto* t = static_cast<GpuThread*>(arg);
  e.grid->dispatch(e.grid->params, &e.grid->which);
  t->wait = Wait::Done;
  Fiber::exit(t->fiber, e.host);
}

// Gives the host thread back until the scheduler releases this thread.
void waitHere(Emulator& e) { Fiber::switchTo(e.running->fiber, e.host); }

void divergence(Emulator& e, const std::string& what) {
  if (e.report.empty()) e.report = e.grid->name + ": " + what;
  e.divergence = true;
}

// Lanes of `warp` that exist in this block (a last, partial warp has fewer).
uint32_t existingLanes(const Emulator& e, size_t warp) {
  size_t first = warp * kWarp, n = std::min<size_t>(kWarp, e.threads.size() - first);
  return n == kWarp ? 0xffffffffu : (1u << n) - 1;
}

// The result of lane `lane` in a shuffle of the group whose values are `values`.
bool shuffleLane(const GpuThread& t, uint32_t lane, uint32_t members, const uint32_t* values, uint64_t& out) {
  uint32_t bval = t.b & 31, cval = t.c & 31, segmask = (t.c >> 8) & 31;
  uint32_t maxLane = (lane & segmask) | (cval & ~segmask), minLane = lane & segmask;
  int64_t j = lane;
  bool p = false;
  switch (static_cast<EmuShuffle>(t.mode)) {
    case EmuShuffle::Up: j = int64_t(lane) - bval; p = j >= int64_t(maxLane); break;
    case EmuShuffle::Down: j = int64_t(lane) + bval; p = j <= int64_t(maxLane); break;
    case EmuShuffle::Bfly: j = lane ^ bval; p = j <= int64_t(maxLane); break;
    case EmuShuffle::Idx: j = minLane | (bval & ~segmask); p = j <= int64_t(maxLane); break;
  }
  if (!p) j = lane;
  if (!(members >> j & 1)) return false;
  out = values[j] | (uint64_t(p) << 32);
  return true;
}

// Releases the lanes of each warp whose warp-wide operation has all its members.
bool resolveWarps(Emulator& e) {
  bool released = false;
  for (size_t w = 0; w * kWarp < e.threads.size(); ++w) {
    GpuThread* lanes = &e.threads[w * kWarp];
    uint32_t exists = existingLanes(e, w), handled = 0;
    for (uint32_t l = 0; l < kWarp && (exists >> l & 1); ++l) {
      GpuThread& t = lanes[l];
      if (t.wait != Wait::Warp || (handled >> l & 1)) continue;
      uint32_t members = t.mask;
      if (!(members >> l & 1) || (members & ~exists)) {
        divergence(e, "lane " + std::to_string(l) + " of " + where(e, t) + " runs a warp-wide operation (#" + std::to_string(t.site) +
                          ") whose mask 0x" + [&] { char b[16]; std::snprintf(b, sizeof b, "%08x", members); return std::string(b); }() +
                          (members >> l & 1 ? " names lanes that do not exist" : " does not name the lane itself"));
        return false;
      }
      bool ready = true;
      for (uint32_t m = 0; m < kWarp; ++m) {
        if (!(members >> m & 1)) continue;
        const GpuThread& o = lanes[m];
        if (o.wait == Wait::Done) {
          divergence(e, "a warp-wide operation (#" + std::to_string(t.site) + ") of " + where(e, t) + " waits for lane " +
                            std::to_string(m) + ", which has exited");
          return false;
        }
        if (o.wait != Wait::Warp) ready = false;
        else if (o.site != t.site || o.mask != t.mask) {
          divergence(e, "lanes " + std::to_string(l) + " and " + std::to_string(m) + " of warp " + std::to_string(w) + " of block " +
                            dim3(e.ctaid) + " wait at different warp-wide operations (#" + std::to_string(t.site) + " and #" +
                            std::to_string(o.site) + ")");
          return false;
        }
      }
      handled |= members;
      if (!ready) continue;
      uint32_t values[kWarp] = {};
      for (uint32_t m = 0; m < kWarp; ++m)
        if (members >> m & 1) values[m] = lanes[m].value;
      for (uint32_t m = 0; m < kWarp; ++m) {
        if (!(members >> m & 1)) continue;
        GpuThread& o = lanes[m];
        switch (o.warpOp) {
          case WarpOp::Sync: o.result = 0; break;
          case WarpOp::Shuffle:
            if (!shuffleLane(o, m, members, values, o.result)) {
              divergence(e, "a shuffle (#" + std::to_string(o.site) + ") of lane " + std::to_string(m) + " of " + where(e, o) +
                                " reads a lane outside its mask");
              return false;
            }
            break;
          case WarpOp::Vote: {
            uint32_t ballot = 0;
            for (uint32_t k = 0; k < kWarp; ++k)
              if ((members >> k & 1) && values[k]) ballot |= 1u << k;
            switch (static_cast<EmuVote>(o.mode)) {
              case EmuVote::All: o.result = ballot == members; break;
              case EmuVote::Any: o.result = ballot != 0; break;
              case EmuVote::Uni: o.result = ballot == 0 || ballot == members; break;
              case EmuVote::Ballot: o.result = ballot; break;
            }
            break;
          }
        }
      }
      for (uint32_t m = 0; m < kWarp; ++m)
        if (members >> m & 1) lanes[m].wait = Wait::None;
      released = true;
    }
  }
  return released;
}

// Releases the block's barrier when every thread waits at the same one.
bool resolveBarrier(Emulator& e) {
  const GpuThread* first = nullptr;
  size_t done = 0, atBarrier = 0;
  for (const GpuThread& t : e.threads) {
    if (t.wait == Wait::Done) ++done;
    else if (t.wait == Wait::Barrier || t.wait == Wait::BarrierReduce) {
      ++atBarrier;
      if (!first) first = &t;
      else if (t.site != first->site) {
        divergence(e, where(e, *first) + " and " + where(e, t) + " wait at different barriers (#" + std::to_string(first->site) +
                          " and #" + std::to_string(t.site) + ")");
        return false;
      }
    }
  }
  if (!first) return false;
  if (atBarrier + done < e.threads.size()) {
    for (const GpuThread& t : e.threads)
      if (t.wait == Wait::Warp) {
        divergence(e, "barrier #" + std::to_string(first->site) + " waits for " + where(e, t) +
                          ", which waits at a warp-wide operation (#" + std::to_string(t.site) + ") whose lanes never all arrive");
        return false;
      }
    return false;
  }
  if (done) {
    divergence(e, "barrier #" + std::to_string(first->site) + " is reached by " + std::to_string(atBarrier) + " of the " +
                      std::to_string(e.threads.size()) + " threads of block " + dim3(e.ctaid) + "; the others have exited");
    return false;
  }
  uint64_t count = 0;
  for (const GpuThread& t : e.threads) count += t.value != 0;
  for (GpuThread& t : e.threads) {
    if (t.wait == Wait::BarrierReduce) {
      switch (static_cast<EmuBarrierReduce>(t.mode)) {
        case EmuBarrierReduce::Popc: t.result = count; break;
        case EmuBarrierReduce::And: t.result = count == e.threads.size(); break;
        case EmuBarrierReduce::Or: t.result = count != 0; break;
      }
    }
    t.wait = Wait::None;
  }
  return true;
}

void runBlock(Emulator& e) {
  const EmuGrid& g = *e.grid;
  size_t n = e.threads.size();
  for (size_t i = 0; i < n; ++i) {
    GpuThread& t = e.threads[i];
    t.linear = static_cast<uint32_t>(i);
    t.tid[0] = static_cast<uint32_t>(i % g.block[0]);
    t.tid[1] = static_cast<uint32_t>(i / g.block[0] % g.block[1]);
    t.tid[2] = static_cast<uint32_t>(i / (size_t(g.block[0]) * g.block[1]));
    t.wait = Wait::None;
    t.fiber.start(*e.stacks[i], &threadMain, &t);
  }
  if (e.sharedBytes) std::memset(e.shared.data(), 0xff, e.sharedBytes);
  for (;;) {
    bool live = false;
    for (GpuThread& t : e.threads) {
      if (t.wait != Wait::None) continue;
      e.running = &t;
      Fiber::switchTo(e.host, t.fiber);
    }
    e.running = nullptr;
    for (const GpuThread& t : e.threads) live |= t.wait != Wait::Done;
    if (!live) return;
    if (!e.divergence && (resolveWarps(e) || resolveBarrier(e))) continue;
    if (!e.divergence) divergence(e, "the threads of block " + dim3(e.ctaid) + " wait for each other forever");
    for (GpuThread& t : e.threads)
      if (t.wait != Wait::Done) t.fiber.abandon();
    return;
  }
}

}  // namespace

std::string runEmulatedGrid(const EmuGrid& g, bool& invalidAccess) {
  Emulator& e = emulator();
  size_t n = size_t(g.block[0]) * g.block[1] * g.block[2];
  if (n == 0 || n > kMaxBlockThreads) {
    invalidAccess = false;
    return g.name + ": a block of " + std::to_string(n) + " threads";
  }
  while (e.stacks.size() < n) e.stacks.push_back(std::make_unique<FiberStack>(kStackBytes));
  if (e.threads.size() != n) e.threads = std::vector<GpuThread>(n);
  e.grid = &g;
  e.invalidAccesses = 0;
  e.report.clear();
  e.divergence = false;
  e.hit = nullptr;
  e.sharedBytes = 0;
  for (uint32_t z = 0; z < g.grid[2]; ++z)
    for (uint32_t y = 0; y < g.grid[1]; ++y)
      for (uint32_t x = 0; x < g.grid[0]; ++x) {
        e.ctaid[0] = x;
        e.ctaid[1] = y;
        e.ctaid[2] = z;
        runBlock(e);
        if (!e.report.empty()) goto finished;
      }
finished:
  e.grid = nullptr;
  invalidAccess = e.invalidAccesses > 0;
  std::string out = std::move(e.report);
  if (e.invalidAccesses > 1) out += " (and " + std::to_string(e.invalidAccesses - 1) + " more invalid accesses in that block)";
  e.report.clear();
  return out;
}

}  // namespace kiln::device

using kiln::device::Emulator;
using kiln::device::GpuThread;
using kiln::device::Wait;
using kiln::device::WarpOp;
using kiln::device::emulator;
using kiln::device::waitHere;

extern "C" uint32_t kiln_emu_sreg(uint32_t which) {
  Emulator& e = emulator();
  const GpuThread& t = *e.running;
  const kiln::device::EmuGrid& g = *e.grid;
  if (which <= 2) return t.tid[which];
  if (which <= 5) return g.block[which - 3];
  if (which <= 8) return e.ctaid[which - 6];
  if (which <= 11) return g.grid[which - 9];
  if (which == 12) return t.linear % 32;
  return 32;
}

extern "C" void kiln_emu_barrier(uint32_t site) {
  Emulator& e = emulator();
  e.running->wait = Wait::Barrier;
  e.running->site = site;
  waitHere(e);
}

extern "C" uint32_t kiln_emu_barrier_reduce(uint32_t site, uint32_t op, uint32_t predicate) {
  Emulator& e = emulator();
  GpuThread& t = *e.running;
  t.wait = Wait::BarrierReduce;
  t.site = site;
  t.mode = op;
  t.value = predicate != 0;
  waitHere(e);
  return static_cast<uint32_t>(t.result);
}

namespace {
uint64_t warpWide(WarpOp op, uint32_t site, uint32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c) {
  Emulator& e = emulator();
  GpuThread& t = *e.running;
  t.wait = Wait::Warp;
  t.warpOp = op;
  t.site = site;
  t.mode = mode;
  t.mask = mask;
  t.value = value;
  t.b = b;
  t.c = c;
  waitHere(e);
  return t.result;
}
}  // namespace

extern "C" void kiln_emu_warp_sync(uint32_t site, uint32_t mask) { warpWide(WarpOp::Sync, site, 0, mask, 0, 0, 0); }

extern "C" uint64_t kiln_emu_shfl(uint32_t site, uint32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c) {
  return warpWide(WarpOp::Shuffle, site, mode, mask, value, b, c);
}

extern "C" uint32_t kiln_emu_vote(uint32_t site, uint32_t mode, uint32_t mask, uint32_t predicate) {
  return static_cast<uint32_t>(warpWide(WarpOp::Vote, site, mode, mask, predicate != 0, 0, 0));
}

extern "C" void* kiln_emu_shared(uint64_t bytes) {
  Emulator& e = emulator();
  if (e.sharedBytes == 0 && bytes) {
    // The first thread of the first block to ask sizes it; the buffer is never
    // moved while the grid runs (every entry of a module asks for the same size).
    if (e.shared.size() < bytes) e.shared.resize(bytes);
    std::memset(e.shared.data(), 0xff, bytes);
    e.sharedBytes = bytes;
  }
  return e.shared.data();
}

extern "C" void* kiln_emu_access(void* p, uint64_t bytes, uint32_t flags) {
  Emulator& e = emulator();
  auto a = reinterpret_cast<uintptr_t>(p);
  bool write = flags & 1;
  auto inside = [&](uintptr_t begin, uint64_t size) { return a >= begin && bytes <= size && a - begin <= size - bytes; };
  using kiln::device::EmuAllocation;
  auto limit = [&](const EmuAllocation& m) { return write ? m.writable : m.readable; };
  if (e.hit && inside(e.hit->begin, limit(*e.hit))) return p;
  auto shared = reinterpret_cast<uintptr_t>(e.shared.data());
  if (e.sharedBytes && inside(shared, e.sharedBytes)) return p;
  const std::vector<EmuAllocation>& memory = e.grid->memory;
  auto it = std::upper_bound(memory.begin(), memory.end(), a, [](uintptr_t x, const EmuAllocation& m) { return x < m.begin; });
  const EmuAllocation* owner = it == memory.begin() ? nullptr : &*(it - 1);
  if (owner && inside(owner->begin, limit(*owner))) {
    e.hit = owner;
    return p;
  }
  if (e.invalidAccesses++ == 0 && e.report.empty()) {
    char addr[32];
    std::snprintf(addr, sizeof addr, "0x%" PRIxPTR, a);
    std::string what = std::string("invalid ") + (write ? "write" : "read") + " of " + std::to_string(bytes) + " bytes at " +
                       addr + " (access #" + std::to_string(flags >> 1) + ") by " + kiln::device::where(e, *e.running) + ": ";
    if (e.sharedBytes && a >= shared && a - shared < e.sharedBytes + 4096) {
      what += std::to_string(a + bytes - shared - e.sharedBytes) + " bytes past the end of the block's " +
              std::to_string(e.sharedBytes) + " bytes of shared memory";
    } else if (owner && a - owner->begin < owner->size + 4096) {
      if (owner->readable == 0)
        what += "inside a " + std::to_string(owner->size) + "-byte block that has been freed (use after free)";
      else
        what += std::to_string(a + bytes - owner->begin - limit(*owner)) + " bytes past the end of a " +
                std::to_string(owner->writable) + "-byte allocation" +
                (write ? "" : " (readable to " + std::to_string(owner->readable) + " bytes, its last 64-byte line)");
    } else if (it != memory.end() && it->begin - a < 4096) {
      what += std::to_string(it->begin - a) + " bytes before a " + std::to_string(it->writable) + "-byte allocation";
    } else {
      what += "not in any allocation of the device";
    }
    e.report = e.grid->name + ": " + what;
  }
  return e.scratch;
}
