// The CPU's physical limits, measured on this machine: one core's FP32 peak
// (fused multiply-adds in registers) and the time to read, or write, a buffer of
// a given size once, warm, from wherever it fits (L1, L2, L3 or memory), on one
// thread or split over several. They are lower bounds on a kernel's time: no
// schedule does its FLOPs faster than the peak, reads its operands faster than
// the read loop or stores its results faster than the write loop (the tuner's
// floors, the benchmarks' ratios).
//
// Every function measures when called (nothing is cached: a caller keeps what it
// measured, and decides when the machine is quiet enough to measure). They use
// the instructions the machine has (AVX-512, AVX2, or plain C++). Thread-safe: no
// shared state; a split read or write starts its own threads.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace kiln::device {

// Floats at a 64-byte boundary (uninitialized), for the read loops' buffers.
// Loads that straddle cache lines make a read loop slower than a kernel's
// aligned reads: 1.6 MB held in L2 took 22 us to read at a 16-byte offset (where
// a large std::vector's data lands) against 11 us aligned, on a Sapphire
// Rapids-class Xeon.
struct AlignedDelete {
  void operator()(float* p) const { ::operator delete(p, std::align_val_t(64)); }
};
using AlignedFloats = std::unique_ptr<float, AlignedDelete>;
AlignedFloats alignedFloats(size_t n);

// The sum of n floats, read with vector loads (4 or 8 accumulators: two loads a
// cycle in flight). The read loop behind the floors.
float readOnce(const float* p, size_t n);

// FP32 FLOP/s of one core: the best of `reps` runs of `iterations` x 12
// independent vector FMAs in registers.
double fp32PeakPerCore(int reps = 5, long iterations = 20'000'000);

// `reps` runs of `flops` FP32 operations as the peak's FMAs in registers, split
// over `threads` threads that start each run together. The seconds of each run:
// its slowest part's. What FLOPs take at peak under the host's conditions of the
// moment (a shared host's vCPU that runs slow or late slows a part), for a
// benchmark that times its floor in the same rounds as its kernels.
std::vector<double> timedFmas(double flops, int threads, int reps);

// `reps` reads of `floats` floats at `buf`, split over `threads` threads that
// start each read together, each reading its own contiguous part `times` times
// over (a loop's steps each read their weights); every other read goes
// backwards by blocks when `alternate`. The seconds of each read: its slowest part's.
// Parts start on whole vectors (16 floats) from `buf`, which should be at a
// 64-byte boundary: loads across cache lines read L2 at about half speed.
std::vector<double> timedReads(const float* buf, size_t floats, int threads, int reps, int times, bool alternate);

// The fastest of `reps` back-to-back reads of a `bytes`-byte buffer (after one
// untimed read that brings it into cache), in seconds, every other one backwards
// in blocks (so a buffer a little over a cache level is read as well as caches
// allow, not with every line evicted before its turn); split over `threads`
// threads that start each read together, each reading its own contiguous part
// (a read takes as long as its slowest part). Buffers over 256 MiB are not
// allocated: the time for 256 MiB is scaled (they stream from memory). Under 64
// KiB (here and below), each timed stretch passes over the buffer enough times
// to cover 64 KiB and counts its time per pass: one pass alone is shorter than
// the clock reads around it.
double readSeconds(double bytes, int threads, int reps = 20);

// The same for writing a `bytes`-byte buffer once, warm: the faster of plain
// vector stores and streaming (non-temporal) ones, so that no kernel's way of
// storing its results beats it.
double writeSeconds(double bytes, int threads, int reps = 20);

// The fastest of `reps` passes (after one untimed) that read a `readBytes`-byte
// buffer and write a `writeBytes`-byte one together, block by block (4 KiB
// written with its share of the reads), split over `threads` threads; plain or
// streaming stores, the faster. What a kernel that reads its operands and
// writes its results once cannot beat. Whether reads and writes overlap is the
// machine's: on a Zen 5 a streaming x * y chain took about its reads' time; on
// a 2-vCPU Xeon guest they add up (two threads: 128 MB read 2.87 ms, 64 MB
// written 1.61 ms, both together 4.77 ms). Either size 0: the other's time.
double readWriteSeconds(double readBytes, double writeBytes, int threads, int reps = 20);

}  // namespace kiln::device
