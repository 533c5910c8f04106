// Tuned schedules timed in their program (tune/program_check.h): a schedule
// that is slower there shows as slower, and one left at the default is not timed.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "jit/host_cpu.h"
#include "jit/tuning_log.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "tune/program_check.h"
#include "tune/tasks.h"

using namespace kiln;

TEST_CASE("a tuned schedule is timed in its program against the default, each kernel at its shapes") {
  // Two kernels, each called once a run at fixed shapes; the first is given a
  // schedule that walks its rows by column (every load a cache line of its
  // own), the second keeps the default.
  auto exe = compile(
      "def @main(%x: Tensor[(1024, 1024), float32], %y: Tensor[(256, 256), float32]) {\n"
      "  (sigmoid(%x) * 3f, tanh(%y) + 1f)\n"
      "}\n",
      "check.relay");
  tune::TaskList list = tune::extractTasks(*exe, {});
  REQUIRE(list.tasks.size() == 2);
  std::vector<tune::TaskResult> results(2);
  size_t big = list.tasks[0].shapes[0][0] == 1024 ? 0 : 1;
  results[0].task = list.tasks[big];
  results[1].task = list.tasks[1 - big];
  std::string why;
  results[0].best = *loop::Schedule::parse("order=1:0,parallel=0", &why);
  INFO(why);
  REQUIRE(!results[0].best.isDefault());

  jit::TuningRecord r;
  r.task = results[0].task.task;
  r.shapes = results[0].task.shapes;
  r.schedule = results[0].best;
  r.micros = 1;
  r.defaultMicros = 2;
  r.machine = "test";
  r.cpu = jit::hostCpuFingerprint();
  std::string logPath =
      (std::filesystem::temp_directory_path() / ("kiln_program_check_" + std::to_string(getpid()) + ".log")).string();
  std::ofstream(logPath) << jit::TuningLog::format(r) << "\n";

  Tensor x = Tensor::empty(DType::Float32, {1024, 1024}), y = Tensor::empty(DType::Float32, {256, 256});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 13) * 0.1f;
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(i % 7) * 0.1f;
  std::vector<Value> args = {Value(x), Value(y)};
  tune::ProgramCheckOptions o;
  o.rounds = 5;
  o.roundMillis = 2;
  std::vector<tune::ProgramTiming> t = tune::checkInProgram(exe, args, results, logPath, o);
  std::filesystem::remove(logPath);
  REQUIRE(t.size() == 2);
  CHECK(t[0].seen);
  CHECK(t[0].calls == 1);
  CHECK(t[0].defaultMicros > 0);
  MESSAGE("column-wise ", t[0].micros, " us against the default's ", t[0].defaultMicros, " us");
  CHECK(t[0].micros > 1.5 * t[0].defaultMicros);
  CHECK(!t[1].seen);  // the default: nothing to check

  // Arguments the program does not take are an error, not a crash.
  std::vector<Value> wrong = {Value(y), Value(x)};
  CHECK_THROWS_AS(tune::checkInProgram(exe, wrong, results, logPath, o), Error);
}
