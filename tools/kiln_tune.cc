// kiln-tune: extracts a program's kernel tasks and searches their schedules by
// measurement, appending the best to a tuning log that vmrun, kilnc and the
// runtime apply (--tuning-log, RuntimeOptions::tuningLog).
//
// Exit status: 0 done (also when nothing was faster: the log then records the
// default), 2 unusable input (bad flags, unreadable program, shape record or
// log), 1 any other failure.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "device/thread_pool.h"
#include "jit/tuning_log.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/npy.h"
#include "kiln/onnx.h"
#include "kiln/vm.h"
#include "tools/tool_util.h"
#include "tune/program_check.h"
#include "tune/tasks.h"
#include "tune/tuner.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kiln-tune PROGRAM --log FILE [options]   (PROGRAM: .relay, .onnx or an executable from kilnc -o)\n"
               "  --log FILE          the tuning log: read to resume, appended to as each task finishes\n"
               "  --shapes FILE       shapes recorded by `vmrun ... --record-shapes FILE` (kernels with `?` dimensions,\n"
               "                      calls and time, which weight the tasks)\n"
               "  --dims LO:HI        without a record, tune `?` dimensions at the powers of two from LO to HI\n"
               "  --params F.npz      bind @main's parameters of those names as constants (weights)\n"
               "  --inputs F.npz      @main's inputs by parameter name: then each tuned schedule is also timed in the\n"
               "                      program against the default, and one slower there is recorded so and not applied\n"
               "  --budget SECONDS    overall (default 600)\n"
               "  --task-budget SECONDS  per task and shape (default 30)\n"
               "  --trials N          candidates per task at most (default 48)\n"
               "  --rounds N          timing rounds per side and candidate (default 10)\n"
               "  --seed N            of the search and the inputs (default 1)\n"
               "  --list              print the tasks and stop (as kilnc --emit tasks)\n"
               "Candidates run in worker processes: one that fails to compile, crashes or hangs is reported and\n"
               "skipped. Run it with the thread count the program will run with (KILN_NUM_THREADS).\n");
}

struct Usage : kiln::Error {
  using Error::Error;
};

double number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(d > 0) || d > 1e9) throw Usage(flag + " needs a positive number, got '" + v + "'");
  return d;
}

// @main's arguments from an .npz by parameter name: every parameter given, no other name.
std::vector<kiln::Value> bindInputs(const kiln::Executable& exe, const std::map<std::string, kiln::Tensor>& inputs,
                                    const std::string& file) {
  const kiln::BytecodeFunction* fn = exe.findFunction("main");
  if (!fn) throw Usage("the program has no @main to run with " + file);
  std::vector<kiln::Value> args(fn->numParams);
  std::vector<bool> bound(fn->numParams, false);
  for (const auto& [name, t] : inputs) {
    auto it = std::find(fn->paramNames.begin(), fn->paramNames.end(), name);
    if (it == fn->paramNames.end()) throw Usage(file + ": '" + name + "' is not a parameter of @main");
    size_t p = static_cast<size_t>(it - fn->paramNames.begin());
    args[p] = kiln::tools::inputValue(t);
    bound[p] = true;
  }
  for (size_t p = 0; p < bound.size(); ++p)
    if (!bound[p]) throw Usage(file + " has no input for @main's parameter '" + fn->paramNames[p] + "'");
  return args;
}

// Times the tuned schedules in the program (program_check.h) and appends each
// one's in-program figures to the log as a record of its own.
void checkInProgram(const std::shared_ptr<const kiln::Executable>& exe, std::span<const kiln::Value> args,
                    std::vector<kiln::tune::TaskResult>& results, const std::filesystem::path& dir,
                    const std::string& logPath) {
  std::string tunedLog = (dir / "tuned.log").string();
  {
    std::ofstream f(tunedLog);
    for (const auto& r : results) {
      if (r.best.isDefault()) continue;
      // Applied whatever an earlier check said of it: this run checks it again.
      kiln::jit::TuningRecord rec = kiln::tune::recordOf(r);
      rec.programMicros = rec.programDefaultMicros = -1;
      f << kiln::jit::TuningLog::format(rec) << "\n";
    }
  }
  std::fprintf(stderr, "timing the tuned schedules in the program against the defaults...\n");
  std::vector<kiln::tune::ProgramTiming> timings = kiln::tune::checkInProgram(exe, args, results, tunedLog, {});
  std::ofstream log(logPath, std::ios::app);
  if (!log) throw kiln::Error("cannot append to tuning log " + logPath);
  for (size_t i = 0; i < results.size(); ++i) {
    kiln::tune::TaskResult& r = results[i];
    if (r.best.isDefault()) continue;
    if (!timings[i].seen) {
      std::fprintf(stderr, "%s [%s]: not called at these shapes in this run; not checked in the program\n",
                   r.task.name.c_str(), kiln::jit::formatShapes(r.task.shapes).c_str());
      continue;
    }
    r.programMicros = timings[i].micros;
    r.programDefaultMicros = timings[i].defaultMicros;
    log << kiln::jit::TuningLog::format(kiln::tune::recordOf(r)) << "\n";
    std::fprintf(stderr, "%s [%s] in the program: %.2f us a call against the default's %.2f (%llu call(s) a run): %s\n",
                 r.task.name.c_str(), kiln::jit::formatShapes(r.task.shapes).c_str(), timings[i].micros,
                 timings[i].defaultMicros, static_cast<unsigned long long>(timings[i].calls),
                 r.lostInProgram() ? "slower, recorded so: the default applies" : "kept");
  }
}

int run(int argc, char** argv) {
  std::string program, logPath, shapesPath, paramsFile, inputsFile;
  bool listOnly = false;
  kiln::tune::ExtractOptions extract;
  kiln::tune::TuneOptions options;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Usage(a + " needs a value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--log") logPath = value();
    else if (a == "--shapes") shapesPath = value();
    else if (a == "--params") paramsFile = value();
    else if (a == "--inputs") inputsFile = value();
    else if (a == "--dims") {
      try {
        kiln::tune::parseDimRange(value(), extract);
      } catch (const kiln::Error& e) {
        throw Usage(e.message());
      }
    } else if (a == "--budget") options.totalBudgetSeconds = number(a, value());
    else if (a == "--task-budget") options.taskBudgetSeconds = number(a, value());
    else if (a == "--trials") options.maxTrials = static_cast<int>(std::min(number(a, value()), 100000.0));
    else if (a == "--rounds") options.measure.rounds = static_cast<int>(std::min(number(a, value()), 1000.0));
    else if (a == "--seed") options.seed = options.measure.seed = static_cast<uint64_t>(number(a, value()));
    else if (a == "--list") listOnly = true;
    else if (!a.empty() && a[0] == '-') throw Usage("unknown option '" + a + "'");
    else if (program.empty()) program = a;
    else throw Usage("more than one program given ('" + program + "' and '" + a + "')");
  }
  if (program.empty()) throw Usage("no program given");
  if (logPath.empty() && !listOnly) throw Usage("--log FILE is needed (where the results go)");

  std::shared_ptr<const kiln::Executable> exe;
  std::vector<kiln::Value> programArgs;
  try {
    kiln::CompileOptions copts;
    if (!paramsFile.empty()) copts.params = kiln::readNpz(paramsFile);
    if (kiln::isOnnxPath(program)) {
      kiln::OnnxModel m = kiln::importOnnxFile(program);
      for (auto& [name, t] : m.params) copts.params.emplace(name, t);
      exe = kiln::compile(m.program, program, copts);
    } else if (program.size() > 6 && program.substr(program.size() - 6) == ".relay") {
      exe = kiln::compileFile(program, copts);
    } else {
      exe = kiln::Executable::load(program);
    }
    if (!shapesPath.empty()) extract.records = kiln::tune::readShapeRecords(shapesPath);
    if (!inputsFile.empty()) {
      programArgs = bindInputs(*exe, kiln::readNpz(inputsFile), inputsFile);
      // Their dtypes and shapes, before the search rather than after it.
      kiln::VirtualMachine(exe).checkArguments("main", programArgs);
    }
  } catch (const kiln::Error& e) {
    throw Usage(e.message());
  }
  kiln::tune::TaskList tasks = kiln::tune::extractTasks(*exe, extract);
  std::string listing = tasks.toString();
  std::fwrite(listing.data(), 1, listing.size(), stdout);
  std::fflush(stdout);
  if (listOnly) return 0;

  // The workers load the kernels from a copy of the executable.
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kiln-tune-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  options.exePath = (dir / "program.kx").string();
  exe->save(options.exePath);
  options.worker = std::filesystem::read_symlink("/proc/self/exe").string();
  options.logPath = logPath;
  options.threads = kiln::device::numThreads();
  options.progress = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<kiln::tune::TaskResult> results = kiln::tune::tuneTasks(*exe, tasks, options);
  if (!inputsFile.empty()) checkInProgram(exe, programArgs, results, dir, logPath);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Beside each result its floor (the least time any schedule can take: FLOPs at
  // peak or operands read once, tune/work_bound.h) and the room it leaves (the
  // default's fastest time in the search over the floor); with
  // --inputs, the tuned schedule's time over the default's in the program.
  std::printf("\n%-18s %-28s %-30s %10s %10s %8s %9s %7s %10s %7s  %s\n", "task", "shapes", "schedule", "default us",
              "tuned us", "speedup", "in prog", "trials", "floor us", "room", "floor is");
  int faster = 0, tuned = 0, roomy = 0, checked = 0, lost = 0;
  for (const auto& r : results) {
    std::string shapes = kiln::jit::formatShapes(r.task.shapes);
    if (shapes.size() > 28) shapes = shapes.substr(0, 25) + "...";
    char inProgram[16] = "-";
    if (r.programMicros > 0 && r.programDefaultMicros > 0)
      std::snprintf(inProgram, sizeof inProgram, "%.2fx", r.programDefaultMicros / r.programMicros);
    std::printf("%-18s %-28s %-30s %10.2f %10.2f %7.2fx %9s %7d %10.2f %6.2fx  %s%s%s\n", r.task.task.c_str(),
                shapes.c_str(), r.best.toString().c_str(), r.defaultMicros, r.micros, r.speedup(), inProgram, r.trials,
                r.floorMicros, r.room(), r.floorWhat.c_str(), r.resumed ? " (log)" : "",
                r.lostInProgram() ? " (slower in the program: not applied)" : "");
    ++tuned;
    if (r.appliedSpeedup() >= 1.2) ++faster;
    if (r.room() >= 1.2) ++roomy;
    if (r.programMicros >= 0) ++checked;
    if (r.lostInProgram()) ++lost;
  }
  std::printf("%d task(s) tuned, %d at least 1.2x faster, %.0f s; log: %s\n", tuned, faster, seconds, logPath.c_str());
  std::printf("%d of them with room for 1.2x (the default at least 1.2x its floor); the others cannot be 1.2x faster\n",
              roomy);
  if (checked)
    std::printf("%d tuned schedule(s) timed in the program: %d slower there than the default (recorded so, not applied)\n",
                checked, lost);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--worker")
    return kiln::tune::workerMain(std::vector<std::string>(argv + 2, argv + argc));
  try {
    return run(argc, argv);
  } catch (const Usage& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
}
