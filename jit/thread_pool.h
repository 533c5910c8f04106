// The thread pool that runs kernels' outer loops in parallel.
//
// One process-wide pool of persistent workers (default: one thread per core, or
// KILN_NUM_THREADS; setNumThreads changes it). parallelFor splits [0, n) into
// a few contiguous pieces per thread, which the caller and the workers claim
// one at a time (so a thread the machine runs late costs a piece, not a share);
// it returns when all are done. Idle workers spin briefly before sleeping, so
// kernels in quick succession do not pay a wake-up each. A parallelFor issued
// while the pool is busy (another thread's
// kernel, or a kernel inside a task) runs inline on its caller, so nothing blocks
// or deadlocks. Kernels reach it through the C entry point kiln_parallel_for.
#pragma once

#include <cstdint>

namespace kiln::jit {

using ParallelTask = void (*)(void* const* buffers, const int64_t* shapes, int64_t begin, int64_t end);

int numThreads();
void setNumThreads(int n);  // 1 disables parallelism; takes effect for later calls

// Runs task over [0, n) in parallel when `work` (an estimate of the total element
// count) is large enough to gain; otherwise inline.
void parallelFor(int64_t n, int64_t work, ParallelTask task, void* const* buffers, const int64_t* shapes);

// How many parallelFor calls the pool has shared out since the process started
// (the rest ran inline): what a test or a profile reads to see kernels go wide.
int64_t parallelJobsRun();

}  // namespace kiln::jit

extern "C" void kiln_parallel_for(int64_t n, int64_t work, kiln::jit::ParallelTask task, void* const* buffers,
                                  const int64_t* shapes);
