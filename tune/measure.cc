// Measuring schedules: seeded inputs, the comparison, timing, and the worker process.
#include "tune/measure.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "jit/kernel.h"
#include "jit/tuning_log.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/memory.h"
#include "runtime/kernel_table.h"

extern char** environ;

namespace kiln::tune {

using kernel_ir::FusedFunction;

std::vector<Tensor> randomInputs(const FusedFunction& f, const std::vector<Shape>& shapes, uint64_t seed) {
  if (shapes.size() != f.params.size())
    throw Error("kernel " + f.name + " takes " + std::to_string(f.params.size()) + " inputs, " +
                std::to_string(shapes.size()) + " shapes given");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    DType dtype = f.params[i].dtype;
    Tensor t = Tensor::empty(dtype, shapes[i]);
    int64_t n = t.numel();
    for (int64_t e = 0; e < n; ++e) {
      switch (dtype) {
        case DType::Float32: t.data<float>()[e] = uniform(rng); break;
        case DType::Float64: t.data<double>()[e] = uniform(rng); break;
        case DType::Int32: t.data<int32_t>()[e] = static_cast<int32_t>(rng() & 1); break;
        case DType::Int64: t.data<int64_t>()[e] = static_cast<int64_t>(rng() & 1); break;
        case DType::Bool: static_cast<uint8_t*>(t.data())[e] = static_cast<uint8_t>(rng() & 1); break;
        default: std::memset(static_cast<char*>(t.data()) + e * static_cast<int64_t>(dtypeSize(dtype)), 0, dtypeSize(dtype));
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

// The largest difference between two outputs (floats: relative to 1 +
// |reference|, or with `normwise` to 1 + the reference's largest magnitude);
// infinity when they differ in shape, in NaN positions or in an integer element.
double difference(const Tensor& a, const Tensor& ref, bool normwise) {
  if (a.shape() != ref.shape() || a.dtype() != ref.dtype()) return INFINITY;
  int64_t n = ref.numel();
  double worst = 0;
  auto floats = [&](auto* x, auto* y) -> double {
    double peak = 0;
    if (normwise)
      for (int64_t i = 0; i < n; ++i)
        if (std::isfinite(static_cast<double>(y[i]))) peak = std::max(peak, std::fabs(static_cast<double>(y[i])));
    for (int64_t i = 0; i < n; ++i) {
      double u = static_cast<double>(x[i]), v = static_cast<double>(y[i]);
      if (std::isnan(u) || std::isnan(v)) {
        if (std::isnan(u) != std::isnan(v)) return double(INFINITY);
        continue;
      }
      if (u == v) continue;  // equal infinities too
      worst = std::max(worst, std::fabs(u - v) / (1 + (normwise ? peak : std::fabs(v))));
    }
    return worst;
  };
  if (ref.dtype() == DType::Float32) return floats(a.data<float>(), ref.data<float>());
  if (ref.dtype() == DType::Float64) return floats(a.data<double>(), ref.data<double>());
  return std::memcmp(a.data(), ref.data(), ref.nbytes()) == 0 ? 0 : INFINITY;
}

// Runs `k` on `inputs` (packing the weights it reads packed, as the VM does for constants).
struct Runner {
  std::shared_ptr<const jit::CompiledKernel> kernel;
  std::vector<Tensor> outputs, packed;
  std::vector<const float*> prepared;

  Runner(const FusedFunction& f, const std::vector<Tensor>& inputs, const loop::Schedule& s) {
    kernel = std::make_shared<const jit::CompiledKernel>(f, Device{}, false, nullptr, std::string_view(), s);
    std::vector<Shape> shapes = kernel->shapesFor(inputs);
    for (int32_t o : f.outputs) outputs.push_back(Tensor::empty(f.typeOf(o).dtype, shapes[static_cast<size_t>(o)]));
    for (const auto& p : kernel->preparedInputs()) {
      Tensor t = runtime::packWeight(inputs[p.input], p.layout, p.param, MemoryPools::processDefault().forDevice(Device{}));
      prepared.push_back(t.defined() ? t.data<float>() : nullptr);
      packed.push_back(std::move(t));
    }
  }
  void run(const std::vector<Tensor>& inputs) const {
    kernel->run(std::span<const Tensor>(inputs), std::span<const Tensor>(outputs),
                std::span<const float* const>(prepared.data(), prepared.size()));
  }
};

double nowMicros() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The mean of the middle half.
double robustMean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t lo = v.size() / 4, hi = v.size() - v.size() / 4;
  double sum = 0;
  for (size_t i = lo; i < hi; ++i) sum += v[i];
  return sum / static_cast<double>(hi - lo);
}

}  // namespace

Measurement measureInProcess(const FusedFunction& f, const std::vector<Shape>& shapes, const loop::Schedule& schedule,
                             const MeasureOptions& options) {
  Measurement m;
  std::vector<Tensor> inputs = randomInputs(f, shapes, options.seed);
  Runner base(f, inputs, loop::Schedule{});
  Runner cand(f, inputs, schedule);
  base.run(inputs);
  cand.run(inputs);
  // Minimal filtering's 4x4 tiles round sums by up to 2e-6 of their terms'
  // magnitudes (jit/conv2d_winograd.cc), ten times a plain float sum, so an
  // output that cancels takes an error near 2e-4 of 1 (a 64-channel 3x3
  // convolution of inputs in [-1, 1]), growing with the channels: theirs is
  // measured against the output's largest magnitude, which grows as they do.
  const bool normwise = schedule.convWinograd == 4;
  for (size_t o = 0; o < base.outputs.size(); ++o)
    m.maxError = std::max(m.maxError, difference(cand.outputs[o], base.outputs[o], normwise));
  // Reassociated sums (another vector width, tiles) differ in the last bits only.
  if (!(m.maxError <= 1e-4)) {
    m.error = "wrong result: differs from the default schedule's by " + std::to_string(m.maxError);
    return m;
  }
  // Calls per round: enough to fill roundMillis, measured on the default.
  double t0 = nowMicros();
  for (int i = 0; i < 3; ++i) base.run(inputs), cand.run(inputs);
  double once = std::max((nowMicros() - t0) / 6, 0.05);
  int calls = std::clamp(static_cast<int>(options.roundMillis * 1e3 / once), 1, 100000);
  std::vector<double> baseTimes, candTimes;
  for (int r = 0; r < options.rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      const Runner& which = (side == (r & 1)) ? base : cand;
      double start = nowMicros();
      for (int i = 0; i < calls; ++i) which.run(inputs);
      ((&which == &base) ? baseTimes : candTimes).push_back((nowMicros() - start) / calls);
    }
  }
  m.defaultMicros = robustMean(baseTimes);
  m.micros = robustMean(candTimes);
  m.ok = true;
  return m;
}

int workerMain(const std::vector<std::string>& args) {
  try {
    if (args.size() != 7) throw Error("worker: expected EXE KERNEL SHAPES SCHEDULE ROUNDS ROUND_MS SEED");
    auto exe = Executable::load(args[0]);
    size_t k = std::stoul(args[1]);
    if (k >= exe->kernels().size()) throw Error("worker: no kernel " + args[1]);
    auto shapes = jit::parseShapes(args[2]);
    if (!shapes) throw Error("worker: bad shapes " + args[2]);
    std::string why;
    auto schedule = loop::Schedule::parse(args[3], &why);
    if (!schedule) throw Error("worker: " + why);
    MeasureOptions o;
    o.rounds = std::stoi(args[4]);
    o.roundMillis = std::stod(args[5]);
    o.seed = std::stoull(args[6]);
    Measurement m = measureInProcess(*exe->kernels()[k].function, *shapes, *schedule, o);
    if (!m.ok) throw Error(m.error);
    std::printf("ok us=%.4f default_us=%.4f max_error=%.3g\n", m.micros, m.defaultMicros, m.maxError);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::printf("error %s\n", msg.c_str());
  }
  std::fflush(stdout);
  return 0;
}

Measurement measureInWorker(const std::string& worker, const std::string& exePath, uint32_t kernel,
                            const std::vector<Shape>& shapes, const loop::Schedule& schedule,
                            const MeasureOptions& options, double timeoutSeconds) {
  Measurement m;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) throw Error("tuner: cannot make a pipe: " + std::string(std::strerror(errno)));
  std::vector<std::string> args = {worker, "--worker", exePath, std::to_string(kernel), jit::formatShapes(shapes),
                                   schedule.toString(), std::to_string(options.rounds),
                                   std::to_string(options.roundMillis), std::to_string(options.seed)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
  // The worker leads a process group of its own, so that a timeout kills
  // whatever it started too (nothing it left behind keeps our output open).
  posix_spawnattr_t attrs;
  posix_spawnattr_init(&attrs);
  posix_spawnattr_setflags(&attrs, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attrs, 0);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, worker.c_str(), &actions, &attrs, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attrs);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    throw Error("tuner: cannot start worker " + worker + ": " + std::strerror(rc));
  }
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
  bool timedOut = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[512];
    ssize_t n = read(pipefd[0], buf, sizeof buf);
    if (n <= 0) break;
    if (out.size() < 4096) out.append(buf, static_cast<size_t>(n));
  }
  close(pipefd[0]);
  if (timedOut) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  kill(-pid, SIGKILL);  // anything of the worker's still running (a crashed worker's children)
  if (timedOut) {
    m.error = "timed out after " + std::to_string(static_cast<int>(timeoutSeconds)) + " s";
    return m;
  }
  if (WIFSIGNALED(status)) {
    m.error = "worker crashed (signal " + std::to_string(WTERMSIG(status)) + ": " + strsignal(WTERMSIG(status)) + ")";
    return m;
  }
  std::istringstream line(out);
  std::string word;
  line >> word;
  if (word == "ok") {
    std::string field;
    while (line >> field) {
      size_t eq = field.find('=');
      if (eq == std::string::npos) continue;
      double v = std::strtod(field.c_str() + eq + 1, nullptr);
      std::string key = field.substr(0, eq);
      if (key == "us") m.micros = v;
      else if (key == "default_us") m.defaultMicros = v;
      else if (key == "max_error") m.maxError = v;
    }
    m.ok = m.micros > 0 && m.defaultMicros > 0;
    if (!m.ok) m.error = "worker gave no times";
    return m;
  }
  std::string rest;
  std::getline(line, rest);
  m.error = word == "error" ? rest.substr(rest.find_first_not_of(' ') == std::string::npos ? 0 : rest.find_first_not_of(' '))
                            : "worker exited with status " + std::to_string(WEXITSTATUS(status)) + " and no answer";
  return m;
}

}  // namespace kiln::tune
