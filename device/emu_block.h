// The emulated CUDA device's execution of a grid: every block's threads as
// fibers (emu_fiber.h) on the launching host thread, and the host runtime that
// GPU code compiled for the host calls in place of the GPU's special registers,
// barriers, warp shuffles and votes, shared memory and checked global accesses.
//
// Semantics (the CUDA programming guide's, as far as Kiln's generated code can
// tell them apart):
//   - blocks run one after another; the threads of a block run interleaved,
//     each until it reaches a barrier or a warp-wide operation or exits;
//   - a barrier (bar.sync 0, and its popc/and/or reductions) releases when every
//     thread of the block waits at that same barrier. Threads waiting at
//     different barriers, or some at a barrier while others have exited, are a
//     reported error (compute-sanitizer's synccheck calls this divergence);
//   - warps are 32 consecutive linear thread ids; shfl.sync (up, down, bfly,
//     idx with the PTX clamp and segment mask), vote.sync (all, any, uni,
//     ballot) and bar.warp.sync exchange among the lanes their mask names once
//     all of them wait at the same operation with the same mask; a mask naming
//     an exited or absent lane, or a shuffle reading a lane outside the mask, is
//     an error;
//   - shared memory is per block, filled with 0xff bytes before the block runs
//     (reading it before writing gives NaNs, not plausible values);
//   - every global load and store is checked against the device's allocations,
//     as far as their holders may read or write them (cuda_emu_driver.h): an
//     access outside them is redirected to a scratch word, counted, and the
//     first one reported with its thread, block, address and the nearest
//     allocation (compute-sanitizer's memcheck). The grid stops after the
//     block that made it.
// Not modelled: memory ordering between threads beyond what barriers give
// (threads interleave only at barriers, so a missing __threadfence or a data
// race between blocks goes unseen), named barriers with thread counts,
// independent thread scheduling inside a warp between warp-wide operations,
// clusters, texture and constant memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::device {

// Codes of the host runtime's entry points, shared with the code generator.
enum class EmuSreg : uint32_t {
  TidX, TidY, TidZ, NtidX, NtidY, NtidZ, CtaidX, CtaidY, CtaidZ, NctaidX, NctaidY, NctaidZ, LaneId, WarpSize
};
enum class EmuShuffle : uint32_t { Up, Down, Bfly, Idx };
enum class EmuVote : uint32_t { All, Any, Uni, Ballot };
enum class EmuBarrierReduce : uint32_t { Popc, And, Or };

// A device allocation as a launch sees it: [begin, begin + readable) may be
// read and [begin, begin + writable) written; the rest of its `size` bytes is
// slack (pool rounding), or all of it freed (readable 0).
struct EmuAllocation {
  uintptr_t begin = 0;
  uint64_t size = 0, readable = 0, writable = 0;
};

struct EmuGrid {
  // The module's dispatcher: runs entry number *which with cuLaunchKernel's
  // parameter array.
  void (*dispatch)(void* const* params, const int64_t* which) = nullptr;
  int64_t which = 0;
  void* const* params = nullptr;
  uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  std::string name;                   // "kernel <fused function> (entry <symbol>)", for reports
  std::vector<EmuAllocation> memory;  // sorted by begin, not overlapping
};

// Runs every block of `g`. Returns "" when the grid ran cleanly, else the report
// of its first problem (an invalid access, a barrier or warp divergence).
// `invalidAccess` tells which kind it was.
std::string runEmulatedGrid(const EmuGrid& g, bool& invalidAccess);

}  // namespace kiln::device

// What host-compiled GPU code calls (resolved by jit/object_loader.cc). `site`
// numbers the call sites of a module, for reports.
extern "C" {
uint32_t kiln_emu_sreg(uint32_t which);
void kiln_emu_barrier(uint32_t site);
uint32_t kiln_emu_barrier_reduce(uint32_t site, uint32_t op, uint32_t predicate);
void kiln_emu_warp_sync(uint32_t site, uint32_t mask);
// The lane's result in the low 32 bits, the PTX predicate in bit 32.
uint64_t kiln_emu_shfl(uint32_t site, uint32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c);
uint32_t kiln_emu_vote(uint32_t site, uint32_t mode, uint32_t mask, uint32_t predicate);
// The block's shared memory, `bytes` long (every entry asks for its module's total).
void* kiln_emu_shared(uint64_t bytes);
// `p` when [p, p + bytes) may be read (written) in device or shared memory, else a
// scratch buffer (and the access is reported). flags: site << 1 | is-write.
void* kiln_emu_access(void* p, uint64_t bytes, uint32_t flags);
}
