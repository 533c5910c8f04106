// Tuned schedules checked where they run: inside their program, beside the
// default schedules, before the JIT may apply them.
//
// The search (tuner.h) times a kernel alone, its inputs fresh in the cache of
// the core that calls it. In a program the inputs are where the kernel before
// left them, often spread over every core's cache by a parallel producer, and
// the pool's threads are in whatever state that kernel left them. A schedule can
// then win alone and lose in its program: on a 2-vCPU Xeon guest the CNN's
// global mean ran serially in 5.4 us alone against the parallel default's 6.1,
// and in 8.0-8.5 us against 6.3-6.7 inside the CNN on two threads.
//
// checkInProgram runs the program with the user's inputs in two Runtimes of
// their own, one compiling every kernel with the default schedules and one with
// the tuned schedules (all at once, as a user applies the log), in alternating
// blocks of runs on the calling thread, and reads each tuned kernel's time per
// call at its task's shapes from the VMs' profiles by shape. Each side's figure
// is the median of its blocks. The tuner records both figures with the schedule
// (jit/tuning_log.h: a schedule slower there is never applied).
//
// Profiling times each call where it is made, so the VMs run without dynamic
// batching (VMOptions::rowBatching): a batched kernel is checked one row-call
// at a time, at the shapes the tuner tuned it for.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/executable.h"
#include "kiln/value.h"
#include "tune/tuner.h"

namespace kiln::tune {

struct ProgramCheckOptions {
  std::string function = "main";
  int rounds = 15;           // blocks per side
  double roundMillis = 5.0;  // least time of one block
};

struct ProgramTiming {
  bool seen = false;         // the task's kernel ran at its shapes (false: not checked)
  double micros = 0;         // per call, with the tuned schedules
  double defaultMicros = 0;  // per call, with the default schedules
  uint64_t calls = 0;        // per run of the program
};

// One timing per result, in order: `seen` only for results whose best schedule
// is not the default. `tunedLog` is a tuning log file holding the tuned
// records. Throws kiln::Error when the program cannot run with `args`.
std::vector<ProgramTiming> checkInProgram(const std::shared_ptr<const Executable>& exe, std::span<const Value> args,
                                          const std::vector<TaskResult>& results, const std::string& tunedLog,
                                          const ProgramCheckOptions& options);

}  // namespace kiln::tune
