// The search: for each task, schedules sampled from the kernel's space and
// refined by mutation of the best so far, each measured against the default
// in a worker process, within a time budget per task and overall.
//
// Every candidate's result is checked against the default schedule's (a wrong
// one is discarded, as is one that fails to compile, crashes or hangs: the
// worker dies, the tuner goes on). The best is measured once more, head to
// head with more rounds; it is recorded only when it is faster by more than the
// noise margin, and the default is recorded otherwise, so applying the log
// never makes a kernel slower. Records are appended to the log as each task
// finishes; a task that the log already covers on this CPU is skipped (resume).
// Each task's floor (work_bound.h) is measured before its search, so a result
// says how much a schedule could have gained at all.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "jit/tuning_log.h"
#include "kernel_ir/schedule.h"
#include "kiln/executable.h"
#include "tune/measure.h"
#include "tune/tasks.h"

namespace kiln::tune {

struct TuneOptions {
  std::string worker;   // the program measureInWorker runs (kiln-tune itself)
  std::string exePath;  // the executable file the workers load (the tasks' kernels)
  std::string logPath;  // the tuning log, appended to; read first to resume
  double taskBudgetSeconds = 30;
  double totalBudgetSeconds = 600;
  int maxTrials = 48;               // candidates per task, at most
  double timeoutSeconds = 120;      // one candidate, compile included
  double acceptSpeedup = 1.03;      // the confirmation must beat the default by this much
  int threads = 1;                  // the thread count the kernels run with (each task's floor)
  uint64_t seed = 1;
  MeasureOptions measure;
  std::function<void(const std::string&)> progress;  // one line at a time
};

struct TaskResult {
  Task task;
  loop::Schedule best;       // the default when nothing was faster
  double micros = 0;         // best's time per call, confirmed
  double defaultMicros = 0;  // the default's, same run
  int trials = 0, failed = 0;
  bool resumed = false;      // the log had it already
  double seconds = 0;        // spent on it
  // The least time any schedule can take (work_bound.h), and what sets it.
  double floorMicros = 0;
  std::string floorWhat;
  // In its program (program_check.h; negative: not checked there).
  double programMicros = -1, programDefaultMicros = -1;
  bool lostInProgram() const { return programMicros >= 0 && programDefaultMicros >= 0 && programMicros > programDefaultMicros; }
  double speedup() const { return micros > 0 ? defaultMicros / micros : 0; }
  // What applying the log gains: nothing where the schedule lost in its program
  // (the JIT keeps the default there).
  double appliedSpeedup() const { return lostInProgram() ? 1.0 : speedup(); }
  // The default's fastest time among this search's measurements (0: none, a
  // resumed task): a shared host's slow stretch can double one measurement, and
  // the floor is its fastest too.
  double fastestDefaultMicros = 0;
  // How much faster than the default the floor is: a schedule can gain at most this.
  double room() const {
    double d = fastestDefaultMicros > 0 ? fastestDefaultMicros : defaultMicros;
    return floorMicros > 0 ? d / floorMicros : 0;
  }
};

// The log record of a result, measured on this machine (its host name and CPU fingerprint).
jit::TuningRecord recordOf(const TaskResult& r);

std::vector<TaskResult> tuneTasks(const Executable& exe, const TaskList& tasks, const TuneOptions& options);

}  // namespace kiln::tune
