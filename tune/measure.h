// Measuring a kernel under a schedule against its default schedule: the same
// seeded inputs, outputs compared, both timed in one process, interleaved.
//
// A candidate schedule may fail to compile or crash the process that runs it,
// so the tuner measures each in a worker process (this executable run again
// with `--worker`): measureInWorker spawns it, reads its one-line answer, and
// reports a crash, a timeout or a wrong result as a failed measurement; the
// tuner goes on. The worker calls measureInProcess.
//
// Timing: warm-up calls first (caches, lazily made packing), then rounds that
// alternate default and candidate, each round as many calls as fill about a
// millisecond; each side's time is the mean of its rounds' middle half
// (outliers on either side dropped), per call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernel_ir/fused_function.h"
#include "kernel_ir/schedule.h"
#include "kiln/tensor.h"

namespace kiln::tune {

struct MeasureOptions {
  int rounds = 10;           // per side
  double roundMillis = 1.0;  // least time of one round
  uint64_t seed = 1;         // of the random inputs
};

struct Measurement {
  bool ok = false;
  std::string error;         // why not ok: compile error, crash, wrong result, timeout
  double micros = 0;         // per call, candidate
  double defaultMicros = 0;  // per call, default schedule, same run
  double maxError = 0;       // largest difference from the default's outputs (relative for floats)
  double speedup() const { return micros > 0 ? defaultMicros / micros : 0; }
};

// Seeded inputs: floats uniform in [-1, 1), integers 0 or 1, bools random.
std::vector<Tensor> randomInputs(const kernel_ir::FusedFunction& f, const std::vector<Shape>& shapes, uint64_t seed);

Measurement measureInProcess(const kernel_ir::FusedFunction& f, const std::vector<Shape>& shapes,
                             const loop::Schedule& schedule, const MeasureOptions& options);

// Runs `worker` (argv[0] of a program whose main calls workerMain for
// `--worker ...`) on kernel `kernel` of executable file `exePath`.
Measurement measureInWorker(const std::string& worker, const std::string& exePath, uint32_t kernel,
                            const std::vector<Shape>& shapes, const loop::Schedule& schedule,
                            const MeasureOptions& options, double timeoutSeconds);

// The worker side: args are EXE KERNEL SHAPES SCHEDULE ROUNDS ROUND_MS SEED; prints
// one line ("ok us=.. default_us=.. max_error=.." or "error WHY") and returns 0.
int workerMain(const std::vector<std::string>& args);

}  // namespace kiln::tune
