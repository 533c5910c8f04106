// A task's floor: the least time any schedule of its kernel can take on this
// machine, so that a tuning result can be read against what was possible.
//
// A kernel must do its floating-point operations and read its operands at
// least once. The floor is the larger of the FLOPs at the cores' FMA peak and
// the operands' bytes at the speed of a warm read loop over a buffer of their
// size (device/cpu_limits.h), so it is a lower bound: FLOPs are counted low (a
// product's multiply-adds, one operation per element computed elsewhere, none
// for data movement or a transcendental's polynomial), bytes once, no per-call
// overhead, and the results' writes not at all: they can overlap the reads.
// Measured here: a 16M-element x * y chain with streaming stores
// (Schedule::streamingStores) ran in 2.97 ms on two threads, where reading its
// operands and result took 4.39 ms and its operands alone 2.92. A default
// schedule within 1.2x of its floor cannot be made 1.2x faster by any schedule.
#pragma once

#include <string>
#include <vector>

#include "kernel_ir/fused_function.h"
#include "kiln/tensor.h"

namespace kiln::tune {

struct WorkBound {
  double flops = 0;  // floating-point operations of one call, counted low
  double bytes = 0;  // the parameters read once and the outputs written once
  double outputBytes = 0;  // of those, the outputs' (not in the floor: see above)
};

// Throws kiln::Error when `shapes` do not fit the kernel (computeShapes).
WorkBound workBound(const kernel_ir::FusedFunction& f, const std::vector<Shape>& shapes);

// The machine's limits the floors use, measured once (MachineFloor::measure)
// with the thread count the kernels run with.
struct MachineFloor {
  double peakFlopsPerCore = 0;
  int threads = 1;
  static MachineFloor measure(int threads);

  struct Floor {
    double micros = 0;
    const char* what = "";  // "FLOPs at peak" or "bytes read"
  };
  // Measures the read of the operands' bytes (on one thread and split over
  // `threads`, the faster) and takes the larger of that and the FLOPs at peak.
  Floor floorOf(const WorkBound& b) const;
};

}  // namespace kiln::tune
