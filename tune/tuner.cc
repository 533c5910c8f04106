// The schedule search and the tuning log it appends to.
#include "tune/tuner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <set>

#include "jit/host_cpu.h"
#include "jit/tuning_log.h"
#include "kernel_ir/lower.h"
#include "kiln/error.h"
#include "tune/work_bound.h"

namespace kiln::tune {

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fmt(const char* f, double a, double b = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

}  // namespace

jit::TuningRecord recordOf(const TaskResult& r) {
  jit::TuningRecord rec;
  rec.task = r.task.task;
  rec.shapes = r.task.shapes;
  rec.schedule = r.best;
  rec.micros = r.micros;
  rec.defaultMicros = r.defaultMicros;
  rec.programMicros = r.programMicros;
  rec.programDefaultMicros = r.programDefaultMicros;
  char host[256] = {};
  rec.machine = gethostname(host, sizeof host - 1) == 0 && host[0] ? host : "-";
  for (char& c : rec.machine)
    if (c == ' ' || c == '=') c = '_';
  rec.cpu = jit::hostCpuFingerprint();
  return rec;
}

std::vector<TaskResult> tuneTasks(const Executable& exe, const TaskList& tasks, const TuneOptions& options) {
  jit::TuningLog existing;
  {
    std::ifstream probe(options.logPath);
    if (probe.good()) existing = jit::TuningLog::load(options.logPath);
  }
  std::ofstream log(options.logPath, std::ios::app);
  if (!log) throw Error("cannot append to tuning log " + options.logPath);
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::vector<TaskResult> results;
  auto start = std::chrono::steady_clock::now();
  std::mt19937_64 rng(options.seed);
  size_t n = tasks.tasks.size();
  MachineFloor machine = MachineFloor::measure(options.threads);
  for (size_t i = 0; i < n; ++i) {
    const Task& task = tasks.tasks[i];
    TaskResult r;
    r.task = task;
    std::string head = "task " + std::to_string(i + 1) + "/" + std::to_string(n) + " " + task.task + " " + task.name + " [" +
                       jit::formatShapes(task.shapes) + "]";
    double outputBytes = 0;
    std::optional<WorkBound> work;
    try {
      work = workBound(*exe.kernels()[task.kernel].function, task.shapes);
      outputBytes = work->outputBytes;
    } catch (const Error&) {
      // Shapes the kernel does not take: its measurement says so below.
    }
    // The floor, measured before the search and again after it, the lower: a
    // shared host's slow stretch (seen to last a minute) would otherwise raise a
    // floor above what the kernel then does.
    auto measureFloor = [&] {
      if (!work) return;
      MachineFloor::Floor floor = machine.floorOf(*work);
      if (r.floorMicros > 0 && r.floorMicros <= floor.micros) return;
      r.floorMicros = floor.micros;
      r.floorWhat = floor.what;
    };
    measureFloor();
    if (const jit::TuningRecord* had = existing.find(task.task, task.shapes)) {
      r.best = had->schedule;
      r.micros = had->micros;
      r.defaultMicros = had->defaultMicros;
      r.programMicros = had->programMicros;
      r.programDefaultMicros = had->programDefaultMicros;
      r.resumed = true;
      say(head + ": in the log already (" + r.best.toString() +
          (existing.lostInProgram(*had) ? "; slower in its program: the default applies)" : ")"));
      results.push_back(std::move(r));
      continue;
    }
    if (secondsSince(start) > options.totalBudgetSeconds) {
      say(head + ": skipped, the overall budget is spent");
      continue;
    }
    auto taskStart = std::chrono::steady_clock::now();
    const kernel_ir::FusedFunction& f = *exe.kernels()[task.kernel].function;
    loop::ScheduleSpace space = loop::scheduleSpaceOf(kernel_ir::lowerToLoops(f, {.directConv = true, .gemmPostOps = true, .splitBorders = true}));
    if (outputBytes < loop::kStreamingStoresLeastBytes) space.hasVectorStores = false;
    std::set<std::string> tried = {loop::Schedule{}.toString()};
    std::vector<std::pair<double, loop::Schedule>> scored;  // (speedup, schedule), best first
    double defaultMicros = 0;
    int stale = 0;
    // The default's latest time (what the log records when nothing wins) and its fastest (the room's).
    auto heardDefault = [&](const Measurement& m) {
      defaultMicros = m.defaultMicros;
      if (m.defaultMicros > 0 && (r.fastestDefaultMicros <= 0 || m.defaultMicros < r.fastestDefaultMicros))
        r.fastestDefaultMicros = m.defaultMicros;
    };
    auto budgetLeft = [&] {
      return secondsSince(taskStart) < options.taskBudgetSeconds && secondsSince(start) < options.totalBudgetSeconds;
    };
    while (r.trials < options.maxTrials && budgetLeft() && stale < 24) {
      // A third of the way in, refine: mutate one of the best few; before, sample.
      loop::Schedule s;
      bool refine = !scored.empty() && r.trials >= std::max(4, options.maxTrials / 3);
      if (refine) {
        size_t top = std::min<size_t>(scored.size(), 3);
        s = space.mutate(scored[std::uniform_int_distribution<size_t>(0, top - 1)(rng)].second, rng);
      } else {
        s = space.sample(rng);
      }
      if (!tried.insert(s.toString()).second) {
        ++stale;
        continue;
      }
      stale = 0;
      ++r.trials;
      Measurement m = measureInWorker(options.worker, options.exePath, task.kernel, task.shapes, s, options.measure,
                                      options.timeoutSeconds);
      if (!m.ok) {
        ++r.failed;
        say(head + ": trial " + std::to_string(r.trials) + " " + s.toString() + " failed: " + m.error);
        continue;
      }
      heardDefault(m);
      scored.emplace_back(m.speedup(), s);
      std::stable_sort(scored.begin(), scored.end(), [](auto& a, auto& b) { return a.first > b.first; });
      say(head + ": trial " + std::to_string(r.trials) + " " + fmt("%.2fx", m.speedup()) + " " +
          s.toString() + ", best " + fmt("%.2fx", scored.front().first) + " " +
          scored.front().second.toString());
    }
    // Confirm the best head to head, with twice the rounds.
    r.best = loop::Schedule{};
    MeasureOptions confirm = options.measure;
    confirm.rounds *= 2;
    confirm.seed += 1000;
    if (!scored.empty() && scored.front().first > 1.0) {
      Measurement m = measureInWorker(options.worker, options.exePath, task.kernel, task.shapes, scored.front().second,
                                      confirm, options.timeoutSeconds);
      if (m.ok) heardDefault(m);
      if (m.ok && m.speedup() >= options.acceptSpeedup) {
        r.best = scored.front().second;
        r.micros = m.micros;
        r.defaultMicros = m.defaultMicros;
      }
    }
    if (r.best.isDefault()) {
      if (defaultMicros <= 0) {
        // Nothing measured (every candidate failed, or no budget): measure the default alone.
        Measurement m = measureInWorker(options.worker, options.exePath, task.kernel, task.shapes, loop::Schedule{},
                                        confirm, options.timeoutSeconds);
        if (!m.ok) {
          say(head + ": the default schedule cannot be measured: " + m.error);
          r.seconds = secondsSince(taskStart);
          results.push_back(std::move(r));
          continue;
        }
        heardDefault(m);
      }
      r.micros = r.defaultMicros = defaultMicros;
    }
    measureFloor();
    r.seconds = secondsSince(taskStart);
    log << jit::TuningLog::format(recordOf(r)) << "\n";
    log.flush();
    say(head + ": done: " + r.best.toString() + " " + fmt("%.2f us (default %.2f us", r.micros, r.defaultMicros) +
        fmt(", %.2fx) after %.0f trial(s)", r.speedup(), static_cast<double>(r.trials)) + ", " + std::to_string(r.failed) +
        " failed, " + fmt("%.1f s", r.seconds) + "; floor " + fmt("%.2f us", r.floorMicros) + " (" + r.floorWhat + "), " +
        fmt("room %.2fx", r.room()));
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace kiln::tune
