// Whole models at their real shapes, Kiln beside ONNX Runtime in the same run.
//
// For each workload of model_workloads.h and each thread count (1, 2): compile the
// Relay program with its weights bound as constants, check Kiln's result against
// the double-precision reference, then time Kiln and ORT alternately (rounds of
// a few runs each, so that both see the same stretch of machine time) and print
// the median latencies, their ratio (below 1: Kiln is faster), the same program
// partitioned for oneDNN (`dnnl us`: what oneDNN takes runs there), and the workload's
// physical floor measured in the same run: the time to stream its weights once
// from where they live with a vector read loop (timed as Kiln is, in blocks of the
// same rounds, its median: see StreamFloor), or its FLOPs at peak, timed the same
// way (ComputeFloor), where that is larger; and `steal%`, the share of the
// machine's CPU time its hypervisor took during the workload's rounds.
//
//   model_bench [--check] [--no-ort] [--only NAME] [--rounds N] [--pause MS] [--dump DIR] [--tuning-log FILE] [--profile]
//               [--no-row-batching]
// --pause sets the idle time before each timed block (default 100 ms: long
// enough for every runtime's spinning threads to sleep). On this project's VM a
// core left idle that long runs memory-bound work slower for the next
// milliseconds, two-thread work most (model_bench's blocks are 4-20 ms), so
// `--no-ort --pause 0` shows Kiln and the floors back to back as well.
// --profile prints, instead of the timings, each workload's per-kernel table on 1
// and 2 threads (calls per run, mean time a call, share): where Kiln's time goes,
// for workloads vmrun cannot take (the tree's input is an ADT value).
// --tuning-log adds `tuned us`: the Relay program with kiln-tune's schedules from
// FILE, timed in the same rounds, and `t/k`, its time over the default schedules'.
// After the table, the same runs' 10th percentiles (Kiln, ORT, the floor's read
// loop): on a shared host whose speed swings between stretches, what each does
// in the good ones. Then Kiln on 2 threads against 1 thread, the two timed by turns in
// the same rounds (the table's rows for 1 and 2 threads are taken minutes apart),
// then Kiln with dynamic batching against without, the same way.
// --no-row-batching runs Kiln's VMs with VMOptions::rowBatching off (every
// kernel call runs where it is made): the figures without dynamic batching.
// --check runs every workload once through Kiln (and partitioned for oneDNN) against the reference and exits
// non-zero on a mismatch (ctest runs this); no timing, no ORT. --dump writes
// each workload as DIR/NAME.relay with NAME_weights.npz and NAME_inputs.npz, for
// `vmrun DIR/NAME.relay --params ... --inputs ... --profile`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernel_ir/library_support.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "kiln/onnx.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"
#include "machine_limits.h"
#include "model_workloads.h"
#include "ort_process.h"

using kiln::Tensor;
using kiln::Value;
using namespace kiln::bench;

namespace {

constexpr double kTolerance = 2e-3;
int gQuiesceMillis = 100;  // --pause
bool gRowBatching = true;  // --no-row-batching

// The value a 1/divisor share of `v` is below (NAN for none).
double shareBelow(std::vector<double> v, size_t divisor) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / divisor];
}
double median(std::vector<double> v) { return shareBelow(std::move(v), 2); }
// The value a tenth of the runs beat: the machine's good stretches.
double tenthPercentile(std::vector<double> v) { return shareBelow(std::move(v), 10); }

// A row of the fastest-tenth table printed after the main one.
struct FastRow {
  std::string workload;
  int threads;
  double kiln, ort, floor;  // 10th percentiles, us (ort NAN when not run); floor as floorOf takes it
};

// The floor's read loop, timed as Kiln is: in blocks of runs after the same
// pause, in the same rounds as Kiln's blocks, each run reading the weights of
// every step once (a loop's step reads its step's weights: the buffer is one
// step's, read `steps` times), split over `threads` threads that start each run
// together and each time their own part; a run takes as long as its slowest part.
// Its median stands beside Kiln's median: the same statistic, under the same
// conditions. After the pause a model's weights have partly left the caches, for
// Kiln's first runs of a block and the floor's alike. The fastest of 200
// back-to-back warm reads, the floor before, set a best case against a median.
class StreamFloor {
 public:
  // At a 64-byte boundary, as a kernel's packed weights are (device::alignedFloats).
  StreamFloor(double bytesPerStep, int steps, int threads)
      : floats_(std::max<size_t>(static_cast<size_t>(bytesPerStep / 4), 1)),
        buf_(kiln::device::alignedFloats(floats_)),
        steps_(steps),
        threads_(threads) {
    std::fill(buf_.get(), buf_.get() + floats_, 1.0f);
  }

  void timeBlock(int per, std::vector<double>& micros) {
    std::this_thread::sleep_for(std::chrono::milliseconds(gQuiesceMillis));
    for (double seconds : kiln::device::timedReads(buf_.get(), floats_, threads_, per, steps_, false))
      micros.push_back(seconds * 1e6);
  }

 private:
  size_t floats_;
  kiln::device::AlignedFloats buf_;
  int steps_, threads_;
};

// The workload's FLOPs at peak, timed as the read loop is: in blocks of runs
// after the same pause, in the same rounds as Kiln's blocks, split over
// `threads` threads that start each run together (device::timedFmas). A peak
// measured once at the start stood for a host whose speed changes between
// stretches: on this project's 2-vCPU guest the start's peak came out at 132
// GFLOP/s in one run and 216 in the next, and a compute-bound workload's
// k/floor swung with it.
class ComputeFloor {
 public:
  ComputeFloor(double flops, int threads) : flops_(flops), threads_(threads) {}

  void timeBlock(int per, std::vector<double>& micros) {
    std::this_thread::sleep_for(std::chrono::milliseconds(gQuiesceMillis));
    for (double seconds : kiln::device::timedFmas(flops_, threads_, per)) micros.push_back(seconds * 1e6);
  }

 private:
  double flops_;
  int threads_;
};

struct Floor {
  double seconds;
  const char* what;
};

// The larger of the weights streamed and the FLOPs at peak (a statistic of
// each floor's runs, in us).
Floor floorOf(double streamMicros, double computeMicros) {
  return computeMicros > streamMicros ? Floor{computeMicros * 1e-6, "FLOPs at peak"}
                                      : Floor{streamMicros * 1e-6, "weights streamed"};
}

// The share of this guest's CPU time that its hypervisor gave to others (the
// `steal` of /proc/stat, all CPUs) between two readings: on a shared host the
// figure that says how much of a stretch's slowness was the host's. NAN where
// /proc/stat has no steal column.
struct CpuTimes {
  double steal = NAN, total = NAN;
};
CpuTimes cpuTimes() {
  CpuTimes t;
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return t;
  unsigned long long v[8] = {};
  if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                  &v[7]) == 8) {
    t.steal = static_cast<double>(v[7]);
    t.total = 0;
    for (unsigned long long x : v) t.total += static_cast<double>(x);
  }
  std::fclose(f);
  return t;
}
double stealPercent(const CpuTimes& a, const CpuTimes& b) {
  double total = b.total - a.total;
  return total > 0 ? 100.0 * (b.steal - a.steal) / total : NAN;
}

// Whether this guest's two vCPUs run on one physical core just now (SMT
// siblings): two threads of FMAs then go no faster than one. The hypervisor of
// this project's 2-vCPU guest moves them between one core and two every few
// seconds (2-thread FMAs at 0.98-1.05x one thread for stretches, 1.9-2.0x for
// others; a fork-join's worker start 0.07-0.12 us against 0.23-0.28), so a
// two-thread figure is a mix of both machines; the bench counts its rounds of each.
bool vcpusShareACore() {
  constexpr double kFlops = 4e6;  // about 25 us on one core
  double one = median(kiln::device::timedFmas(kFlops, 1, 5));
  double two = median(kiln::device::timedFmas(kFlops, 2, 5));
  return two > one / 1.4;
}

struct KilnModel {
  std::shared_ptr<kiln::Runtime> runtime;
  std::shared_ptr<const kiln::Executable> exe;
  std::unique_ptr<kiln::VirtualMachine> vm;
  std::vector<Value> args;

  // The workload's Relay program, or (onnxFile given) the ONNX model ORT runs,
  // imported: its weights are initializers, its inputs the workload's, in order.
  // `partition`: the Relay program partitioned for these libraries (oneDNN).
  // `tuningLog`: kernels compiled with the schedules kiln-tune recorded there.
  KilnModel(const Workload& w, int threads, const std::string& onnxFile = "", std::vector<std::string> partition = {},
            const std::string& tuningLog = "", bool rowBatching = gRowBatching) {
    kiln::RuntimeOptions ro;
    ro.numThreads = threads;
    ro.tuningLog = tuningLog;
    runtime = kiln::Runtime::create(ro);
    if (onnxFile.empty()) {
      kiln::CompileOptions co;
      for (const auto& [name, t] : w.weights) co.params[name] = t;
      co.partition = std::move(partition);
      exe = kiln::compile(w.program, w.name + ".relay", co);
    } else {
      exe = kiln::compileOnnx(kiln::importOnnxFile(onnxFile));
    }
    kiln::VMOptions vo;
    vo.runtime = runtime;
    vo.rowBatching = rowBatching;
    vm = std::make_unique<kiln::VirtualMachine>(exe, vo);
    if (onnxFile.empty()) {
      args = workloadArguments(w, *exe);
    } else {
      for (const auto& [name, t] : w.inputs) args.emplace_back(t);
    }
  }
  Tensor run() { return vm->invoke("main", std::span<const Value>(args.data(), args.size())).tensor(); }
};

// Writes the workload's weights and inputs as .npy and builds its ONNX model there.
std::string prepareOnnx(const Workload& w, OrtProcess& ort, const std::string& root) {
  std::string dir = root + "/" + w.name;
  std::filesystem::create_directories(dir);
  for (const auto& [name, t] : w.weights) kiln::writeNpy(dir + "/" + name + ".npy", t);
  for (const auto& [name, t] : w.inputs) kiln::writeNpy(dir + "/" + name + ".npy", t);
  std::string kind = w.onnxKind == "lstm" && w.name.find("dyn") != std::string::npos ? "lstm_dyn" : w.onnxKind;
  std::string error;
  if (!ort.buildModel(dir, kind, error)) {
    std::fprintf(stderr, "%s: no ONNX model: %s\n", w.name.c_str(), error.c_str());
    return "";
  }
  return dir;
}

double ortError(const std::vector<float>& out, const Tensor& expected) {
  if (static_cast<int64_t>(out.size()) != expected.numel()) return INFINITY;
  Tensor t = Tensor::empty(kiln::DType::Float32, expected.shape());
  std::copy(out.begin(), out.end(), t.data<float>());
  return relativeError(t, expected);
}

// Kiln's per-kernel figures over `runs` runs after a warm-up, by time spent.
void profile(const std::vector<Workload>& all, int runs) {
  for (const Workload& w : all)
    for (int threads : {1, 2}) {
      KilnModel m(w, threads);
      for (int i = 0; i < 10; ++i) m.run();
      m.vm->enableProfiling();
      auto t0 = Clock::now();
      for (int i = 0; i < runs; ++i) m.run();
      double perRun = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / runs;
      const auto& prof = m.vm->kernelProfile();
      std::vector<size_t> order(prof.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prof[a].totalNanos > prof[b].totalNanos; });
      double kernels = 0;
      for (const auto& p : prof) kernels += static_cast<double>(p.totalNanos) / 1e3 / runs;
      std::printf("%s, %d thread%s: %.1f us a run, %.1f us of it in kernels (profiling on)\n", w.name.c_str(), threads,
                  threads > 1 ? "s" : "", perRun, kernels);
      std::printf("  %-44s %10s %10s %7s\n", "kernel", "calls/run", "mean us", "share");
      for (size_t k : order) {
        const auto& p = prof[k];
        if (p.calls == 0) continue;
        double us = static_cast<double>(p.totalNanos) / 1e3;
        std::printf("  %-44s %10.1f %10.2f %6.1f%%\n", m.exe->kernels()[k].function->name.c_str(),
                    static_cast<double>(p.calls) / runs, us / static_cast<double>(p.calls), 100.0 * us / runs / perRun);
      }
    }
}

// Runs per timed block: about 20 ms of the model's work (run once more to size it).
int runsPerBlock(KilnModel& m) {
  auto t0 = Clock::now();
  m.run();
  return std::clamp(static_cast<int>(0.02 / std::max(1e-7, secondsSince(t0))), 1, 200);
}

// Each runtime's idle threads spin for a while after a run (Kiln's pool 200 us,
// oneDNN's OpenMP threads and ORT's longer): a pause before each block lets the
// last one's threads sleep, so no block is timed while another's threads still
// hold the cores (without it, Kiln's two-thread runs right after the oneDNN block
// took up to 1.6x as long).
void timeBlock(KilnModel* model, int per, std::vector<double>& times) {
  if (!model) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(gQuiesceMillis));
  for (int i = 0; i < per; ++i) {
    auto s = Clock::now();
    model->run();
    times.push_back(secondsSince(s) * 1e6);
  }
}

// The medians of `a` and `b` timed by turns in the same rounds (blocks of about
// 20 ms after a pause, as the main table's), after two warm-up runs each (the
// first runs compile the kernels and pack the weights).
std::pair<double, double> alternatingMedians(KilnModel& a, KilnModel& b, int rounds) {
  for (int i = 0; i < 2; ++i) {
    a.run();
    b.run();
  }
  int per = runsPerBlock(a);
  std::vector<double> times[2];
  for (int r = 0; r < rounds; ++r) {
    timeBlock(&a, per, times[0]);
    timeBlock(&b, per, times[1]);
  }
  return {median(times[0]), median(times[1])};
}

// Kiln on 2 threads against Kiln on 1, timed by turns in the same rounds: "two
// threads never slower than one" compares two figures taken in the same stretch
// of machine time. The main table's 1- and 2-thread rows are taken minutes
// apart, and on a shared machine the same model's median moves by 10-30%
// between such stretches.
void threadScaling(const std::vector<Workload>& all, int rounds) {
  std::printf("\nKiln, 2 threads against 1, alternating in the same rounds (medians of %d rounds)\n", rounds);
  std::printf("%-10s %10s %10s %8s\n", "workload", "1 thr us", "2 thr us", "2/1");
  for (const Workload& w : all) {
    KilnModel one(w, 1), two(w, 2);
    auto [m1, m2] = alternatingMedians(one, two, rounds);
    std::printf("%-10s %10.1f %10.1f %8.2f\n", w.name.c_str(), m1, m2, m2 / m1);
    std::fflush(stdout);
  }
}

// Kiln with dynamic batching (VMOptions::rowBatching) against without, by turns
// in the same rounds, on 1 and 2 threads: what deferring and batching kernel
// calls gains where calls can be batched (the tree), and costs where they cannot.
void batchingEffect(const std::vector<Workload>& all, int rounds) {
  std::printf("\nKiln with row batching against without, alternating in the same rounds (medians of %d rounds)\n", rounds);
  std::printf("%-10s %4s %10s %10s %8s\n", "workload", "thr", "off us", "on us", "on/off");
  for (const Workload& w : all)
    for (int threads : {1, 2}) {
      KilnModel off(w, threads, "", {}, "", false), on(w, threads, "", {}, "", true);
      auto [m0, m1] = alternatingMedians(off, on, rounds);
      std::printf("%-10s %4d %10.1f %10.1f %8.2f\n", w.name.c_str(), threads, m0, m1, m1 / m0);
      std::fflush(stdout);
    }
}

int check(const std::vector<Workload>& all) {
  int failures = 0;
  for (const Workload& w : all)
    for (int threads : {1, 2}) {
      KilnModel m(w, threads);
      double e = relativeError(m.run(), w.expected);
      double e2 = relativeError(m.run(), w.expected);  // a second run reuses prepared state
      bool ok = e <= kTolerance && e2 <= kTolerance;
      std::printf("%-10s %d thread%s  error %.2g, again %.2g  %s\n", w.name.c_str(), threads, threads > 1 ? "s" : " ", e, e2,
                  ok ? "ok" : "MISMATCH");
      failures += !ok;
      if (kiln::kernel_ir::findLibrary("dnnl")->available) {
        KilnModel d(w, threads, "", {"dnnl"});
        double de = relativeError(d.run(), w.expected), de2 = relativeError(d.run(), w.expected);
        bool dok = de <= kTolerance && de2 <= kTolerance;
        std::printf("%-10s %d thread%s  partitioned for dnnl: error %.2g, again %.2g  %s\n", w.name.c_str(), threads,
                    threads > 1 ? "s" : " ", de, de2, dok ? "ok" : "MISMATCH");
        failures += !dok;
      }
    }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only;
  int rounds = 15;
  bool checkOnly = false, noOrt = false, profileOnly = false;
  std::string dump, tuningLog;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--check") checkOnly = true;
    else if (a == "--no-ort") noOrt = true;
    else if (a == "--profile") profileOnly = true;
    else if (a == "--dump" && i + 1 < argc) dump = argv[++i];
    else if (a == "--tuning-log" && i + 1 < argc) tuningLog = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--pause" && i + 1 < argc) gQuiesceMillis = std::clamp(std::atoi(argv[++i]), 0, 10'000);
    else if (a == "--no-row-batching") gRowBatching = false;
    else {
      std::fprintf(stderr, "usage: model_bench [--check] [--no-ort] [--only NAME] [--rounds N] [--pause MS] [--dump DIR] "
                           "[--tuning-log FILE] [--profile] [--no-row-batching]\n");
      return 2;
    }
  }
  std::vector<Workload> all = makeWorkloads();
  std::erase_if(all, [&](const Workload& w) { return !only.empty() && w.name != only; });
  if (checkOnly) return check(all);
  if (profileOnly) {
    profile(all, 20 * rounds);
    return 0;
  }
  if (!dump.empty()) {
    std::filesystem::create_directories(dump);
    for (const Workload& w : all) {
      std::FILE* f = std::fopen((dump + "/" + w.name + ".relay").c_str(), "w");
      if (!f) return 1;
      std::fputs(w.program.c_str(), f);
      std::fclose(f);
      kiln::writeNpz(dump + "/" + w.name + "_weights.npz", w.weights);
      if (!w.tree) kiln::writeNpz(dump + "/" + w.name + "_inputs.npz", w.inputs);
    }
    return 0;
  }

  OrtProcess ort(noOrt ? "" : KILN_SOURCE_DIR "/bench/ort");
  if (!ort.unavailable().empty()) std::printf("ONNX Runtime: not run (%s)\n", ort.unavailable().c_str());
  std::string root = (std::filesystem::temp_directory_path() / ("kiln_model_bench_" + std::to_string(::getpid()))).string();
  double peak = fp32Peak();
  std::printf("FP32 peak %.0f GFLOP/s per core at the start; medians of %d rounds, Kiln and ORT alternating, %d ms idle before "
              "each block; the floors are timed in the same rounds; steal%%: the share of this machine's CPU time its "
              "hypervisor gave to others during the workload's rounds; smt%%: the share of its rounds in which two "
              "threads of FMAs ran no faster than one (the two CPUs were one physical core's hyperthreads)\n",
              peak / 1e9, rounds, gQuiesceMillis);
  std::printf("a two-thread parallel loop costs %.0f ns beyond its work (its start and finish: paid by every loop step "
              "split over the threads, by none of the floors)\n\n",
              parallelOverheadNanos(2));
  // kiln: the workload's Relay program; kiln-onnx: the ONNX file ORT runs, imported.
  // dnnl: the Relay program partitioned for oneDNN (--partition dnnl), when Kiln has it.
  bool dnnl = kiln::kernel_ir::findLibrary("dnnl")->available;
  if (!dnnl) std::printf("oneDNN: not run (this Kiln is built without it)\n");
  // tuned: the Relay program with the schedules of --tuning-log (kiln-tune), beside the default's.
  if (!tuningLog.empty()) std::printf("tuned: kernels compiled with the schedules of %s\n", tuningLog.c_str());
  std::printf("%-10s %3s %10s %10s %7s %10s %7s %10s %7s %10s %7s %10s %8s %6s %5s  %s\n", "workload", "thr", "kiln us", "ort us",
              "k/ort", "k-onnx us", "ko/ort", "dnnl us", "d/ort", "tuned us", "t/k", "floor us", "k/floor", "steal%", "smt%",
              "floor is");
  std::vector<FastRow> fastest;
  for (const Workload& w : all) {
    std::string dir = ort.unavailable().empty() && !w.onnxKind.empty() ? prepareOnnx(w, ort, root) : "";
    for (int threads : {1, 2}) {
      KilnModel m(w, threads);
      double err = relativeError(m.run(), w.expected);
      if (err > kTolerance) {
        std::printf("%-10s %3d  Kiln's result is wrong: relative error %.3g\n", w.name.c_str(), threads, err);
        return 1;
      }
      // Kiln again on the ONNX file ORT runs (imported: the LSTM's ONNX Loop becomes
      // Kiln's own loop), checked against the same reference.
      std::unique_ptr<KilnModel> imported;
      if (!dir.empty()) {
        try {
          imported = std::make_unique<KilnModel>(w, threads, dir + "/model.onnx");
          double e = relativeError(imported->run(), w.expected);
          if (e > kTolerance) {
            std::printf("%-10s %3d  Kiln's result from the ONNX model is wrong: relative error %.3g\n", w.name.c_str(), threads, e);
            return 1;
          }
        } catch (const kiln::Error& e) {
          std::fprintf(stderr, "%s: ONNX import: %s\n", w.name.c_str(), e.what());
          imported.reset();
        }
      }
      std::unique_ptr<KilnModel> tuned;
      if (!tuningLog.empty()) {
        tuned = std::make_unique<KilnModel>(w, threads, "", std::vector<std::string>{}, tuningLog);
        double e = relativeError(tuned->run(), w.expected);
        if (e > kTolerance) {
          std::printf("%-10s %3d  Kiln's result with tuned schedules is wrong: relative error %.3g\n", w.name.c_str(), threads, e);
          return 1;
        }
      }
      // Kiln with oneDNN running what it takes (the rest on Kiln's kernels).
      std::unique_ptr<KilnModel> partitioned;
      if (dnnl) {
        partitioned = std::make_unique<KilnModel>(w, threads, "", std::vector<std::string>{"dnnl"});
        double e = relativeError(partitioned->run(), w.expected);
        if (e > kTolerance) {
          std::printf("%-10s %3d  Kiln's result partitioned for dnnl is wrong: relative error %.3g\n", w.name.c_str(), threads, e);
          return 1;
        }
      }
      std::string ortError_;
      bool withOrt = !dir.empty() && ort.load(dir, threads, ortError_);
      if (!ortError_.empty()) std::fprintf(stderr, "%s: ORT: %s\n", w.name.c_str(), ortError_.c_str());
      int per = runsPerBlock(m);
      std::vector<double> kiln, kilnOnnx, kilnDnnl, kilnTuned, onnx, micros, floorRuns;
      std::vector<float> out;
      StreamFloor streamFloor(w.weightBytes / w.steps, w.steps, threads);
      ComputeFloor computeFloor(w.flops, threads);
      std::vector<double> computeRuns;
      CpuTimes before = cpuTimes();
      int sharedRounds = 0;
      for (int r = 0; r < rounds; ++r) {
        sharedRounds += vcpusShareACore() ? 1 : 0;
        timeBlock(&m, per, kiln);
        streamFloor.timeBlock(per, floorRuns);
        computeFloor.timeBlock(per, computeRuns);
        timeBlock(imported.get(), per, kilnOnnx);
        timeBlock(tuned.get(), per, kilnTuned);
        timeBlock(partitioned.get(), per, kilnDnnl);
        if (withOrt) std::this_thread::sleep_for(std::chrono::milliseconds(gQuiesceMillis));
        if (withOrt && ort.run(per, micros, out, ortError_)) {
          onnx.insert(onnx.end(), micros.begin(), micros.end());
        } else if (withOrt) {
          std::fprintf(stderr, "%s: ORT: %s\n", w.name.c_str(), ortError_.c_str());
          withOrt = false;
        }
      }
      if (withOrt && ortError(out, w.expected) > kTolerance) {
        std::printf("%-10s ORT's result differs from the reference (error %.3g): the models disagree\n", w.name.c_str(),
                    ortError(out, w.expected));
        return 1;
      }
      double steal = stealPercent(before, cpuTimes());
      Floor floor = floorOf(median(floorRuns), median(computeRuns));
      double k = median(kiln), o = median(onnx);
      char ortCol[32] = "-", ratio[32] = "-", onnxCol[32] = "-", onnxRatio[32] = "-", dnnlCol[32] = "-", dnnlRatio[32] = "-";
      char tunedCol[32] = "-", tunedRatio[32] = "-";
      if (!kilnTuned.empty()) {
        std::snprintf(tunedCol, sizeof tunedCol, "%.1f", median(kilnTuned));
        std::snprintf(tunedRatio, sizeof tunedRatio, "%.2f", median(kilnTuned) / k);
      }
      if (!kilnDnnl.empty()) {
        std::snprintf(dnnlCol, sizeof dnnlCol, "%.1f", median(kilnDnnl));
        if (!onnx.empty()) std::snprintf(dnnlRatio, sizeof dnnlRatio, "%.2f", median(kilnDnnl) / o);
      }
      if (!onnx.empty()) {
        std::snprintf(ortCol, sizeof ortCol, "%.1f", o);
        std::snprintf(ratio, sizeof ratio, "%.2f", k / o);
      }
      if (!kilnOnnx.empty()) {
        std::snprintf(onnxCol, sizeof onnxCol, "%.1f", median(kilnOnnx));
        if (!onnx.empty()) std::snprintf(onnxRatio, sizeof onnxRatio, "%.2f", median(kilnOnnx) / o);
      }
      std::printf("%-10s %3d %10.1f %10s %7s %10s %7s %10s %7s %10s %7s %10.1f %8.2f %6.1f %5.0f  %s\n", w.name.c_str(), threads,
                  k, ortCol, ratio, onnxCol, onnxRatio, dnnlCol, dnnlRatio, tunedCol, tunedRatio, floor.seconds * 1e6,
                  k / (floor.seconds * 1e6), steal, 100.0 * sharedRounds / rounds, floor.what);
      std::fflush(stdout);
      fastest.push_back({w.name, threads, tenthPercentile(kiln), tenthPercentile(onnx),
                         floorOf(tenthPercentile(floorRuns), tenthPercentile(computeRuns)).seconds * 1e6});
    }
  }
  std::printf("\nThe same runs' 10th percentiles (the host's good stretches: a tenth of the runs were faster; the floor\n"
              "from its read loop's 10th percentile)\n");
  std::printf("%-10s %3s %10s %10s %7s %10s %8s\n", "workload", "thr", "kiln us", "ort us", "k/ort", "floor us", "k/floor");
  for (const FastRow& r : fastest) {
    char ortCol[32] = "-", ratio[32] = "-";
    if (!std::isnan(r.ort)) {
      std::snprintf(ortCol, sizeof ortCol, "%.1f", r.ort);
      std::snprintf(ratio, sizeof ratio, "%.2f", r.kiln / r.ort);
    }
    std::printf("%-10s %3d %10.1f %10s %7s %10.1f %8.2f\n", r.workload.c_str(), r.threads, r.kiln, ortCol, ratio, r.floor,
                r.kiln / r.floor);
  }
  threadScaling(all, rounds);
  if (gRowBatching) batchingEffect(all, rounds);
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
