// Tuning logs: what the tuner (kiln-tune) measured, one record per kernel and
// shape, and the lookup the JIT does with them when it compiles a kernel.
//
// A log is a text file, one record per line, appended as tuning runs (so an
// interrupted run keeps what it found, and a later run resumes from it):
//
//   task=3f0c9a1e55d2b7c4 shapes=1x128;1024x128 schedule=parallel=0,vec=8 us=12.4 default_us=20.1 machine=build7 cpu=x86_64|AuthenticAMD|...
//
// `task` is the kernel's task key (taskKey: its content, not its name), `shapes`
// its parameters' concrete shapes (`;` between parameters, `x` between
// dimensions, `scalar` for rank 0), `schedule` a loop::Schedule's text, `us` the
// median time measured with it and `default_us` with the default schedule, and
// `cpu` the measuring machine's fingerprint (jit/host_cpu.h). `#` starts a
// comment line. A malformed line is a kiln::Error naming the file and line.
//
// A record may also carry `program_us=.. program_default_us=..` (both or
// neither): the kernel's time per call at those shapes inside its program, with
// the schedule and with the default, measured in the same runs (kiln-tune
// --inputs, tune/program_check.h). A schedule slower there than the default
// lost where it runs (a kernel timed alone finds its inputs in its own core's
// cache; in a program they are where the kernel before left them): the JIT
// never applies it for that task and shape, whatever other records say of it,
// and the kernel keeps the default there unless a record of another schedule
// that did not lose comes after.
//
// Records measured on a CPU other than this one (other features, other model)
// are not applied: each such task is listed once in notes(). For one task and
// shape the fastest record wins. A kernel with `?` dimensions takes the record
// of its task whose shapes are nearest (log2 distance, dimension by dimension)
// to the shapes it runs with.
//
// Thread-safety: a TuningLog is immutable once loaded; lookups may run concurrently.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kernel_ir/fused_function.h"
#include "kernel_ir/schedule.h"
#include "kiln/tensor.h"

namespace kiln::jit {

struct TuningRecord {
  std::string task;
  std::vector<Shape> shapes;
  loop::Schedule schedule;
  double micros = 0;
  double defaultMicros = 0;
  std::string machine;
  std::string cpu;
  // In its program (both or neither; negative: not checked there).
  double programMicros = -1;
  double programDefaultMicros = -1;
  bool checkedInProgram() const { return programMicros >= 0 && programDefaultMicros >= 0; }
  bool lostInProgram() const { return checkedInProgram() && programMicros > programDefaultMicros; }
};

// A kernel's task key: 16 hex digits of its content hash (operators, attributes,
// types; not its name), the same in every program that has the kernel.
std::string taskKey(const kernel_ir::FusedFunction& f);

// "1x128;1024x128" and back (nullopt when malformed).
std::string formatShapes(std::span<const Shape> shapes);
std::optional<std::vector<Shape>> parseShapes(std::string_view text);

class TuningLog {
 public:
  TuningLog() = default;
  // Reads `path`; throws kiln::Error "path:line: why" on a malformed record.
  static TuningLog load(const std::string& path);
  static TuningLog parse(std::string_view text, const std::string& name);
  // One record as a log line (no newline).
  static std::string format(const TuningRecord& r);

  // Adds a record (one of this machine's, or noted and dropped when another's).
  void add(TuningRecord r);

  // The schedule for kernel `task` at `shapes`: the record for exactly these
  // shapes, else the nearest of its task's; nullopt when the task has none (a
  // record whose schedule lost in its program counts as none).
  std::optional<loop::Schedule> lookup(const std::string& task, std::span<const Shape> shapes) const;
  // The record for exactly these shapes, or null (one that lost in its program
  // too: lostInProgram says so).
  const TuningRecord* find(const std::string& task, std::span<const Shape> shapes) const;
  // Whether the latest check of r's schedule at r's task and shapes, in any of
  // the log's records, found it slower in its program than the default.
  bool lostInProgram(const TuningRecord& r) const;
  bool hasTask(const std::string& task) const { return byTask_.count(task) != 0; }
  size_t size() const { return records_.size(); }
  const std::vector<TuningRecord>& records() const { return records_; }
  // What was not applied and why ("12 records for 3 tasks measured on another CPU ...").
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  std::vector<TuningRecord> records_;
  std::unordered_map<std::string, std::vector<size_t>> byTask_;
  // "task shapes schedule" of the schedules that lost in their programs.
  std::unordered_set<std::string> lost_;
  std::vector<std::string> notes_;
  size_t foreign_ = 0;
  std::vector<std::string> foreignMachines_;
  void noteForeign(const TuningRecord& r);
  static std::string lostKey(const TuningRecord& r);
};

}  // namespace kiln::jit
