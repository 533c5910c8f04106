// A task's floor: the least time any schedule of its kernel can take on this
// machine, so that a tuning result can be read against what was possible.
//
// A kernel must do its floating-point operations, read its operands and write
// its results at least once. The floor is the largest of the FLOPs at the cores'
// FMA peak, the operands' bytes at the speed of a warm read loop over a buffer
// of their size, and the results' bytes at the speed of the faster of plain and
// streaming stores over a buffer of theirs (device/cpu_limits.h), so it is a
// lower bound: FLOPs are counted low (a product's multiply-adds, one operation
// per element computed elsewhere, none for data movement or a transcendental's
// polynomial), bytes once, no per-call overhead. Reads and writes are also
// measured together, in one loop that reads the operands' bytes and writes the
// results' (device::readWriteSeconds), since whether they overlap is the
// machine's: on a Zen 5 a 16M-element x * y chain with streaming stores
// (Schedule::streamingStores) ran in 2.97 ms on two threads, where reading its
// operands alone took 2.92 (they overlap); on a 2-vCPU Xeon guest, two threads
// read 128 MB in 2.87 ms and streamed 64 MB out in 1.61, and the two together
// took 4.77 (they add up: a floor of the larger alone flattered the element-wise
// chains and softmaxes there by 1.5-2.6x). Writes alone matter where stores are
// slow: on that guest 1 MB took 21.9 us to write on one thread against 7.3 us
// to read. A default schedule within 1.2x of its floor cannot be made 1.2x
// faster by any schedule.
#pragma once

#include <string>
#include <vector>

#include "kernel_ir/fused_function.h"
#include "kiln/tensor.h"

namespace kiln::tune {

struct WorkBound {
  double flops = 0;  // floating-point operations of one call, counted low
  double bytes = 0;  // the parameters read once and the outputs written once
  double outputBytes = 0;  // of those, the outputs'
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
    const char* what = "";  // "FLOPs at peak", "bytes read", "bytes written" or "bytes read and written"
  };
  // Measures the read of the operands' bytes, the write of the results' and
  // both in one pass (each on one thread and split over `threads`, the faster)
  // and takes the largest of those and the FLOPs at peak.
  Floor floorOf(const WorkBound& b) const;
};

}  // namespace kiln::tune
