// Kernel throughput and JIT latency, each next to the machine limit measured in
// the same run: a fused element-wise chain against copy bandwidth, and the time
// from fused function to callable kernel. `kernel_bench --tuning-log LOG` times
// each product with its default schedule and with kiln-tune's, alternately.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <random>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/passes/to_fused_function.h"
#include "jit/kernel.h"
#include "jit/tuning_log.h"
#include "device/thread_pool.h"
#include "machine_limits.h"

using namespace kiln;

namespace {

kernel_ir::FusedFunction fused(const std::string& src, const std::string& name) {
  auto m = compiler::loadProgram(src, name + ".relay");
  return compiler::toFusedFunction(m->findFunction("main")->fn, name);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}


// The latency kernels: fresh element-wise kernels (different constants).
kernel_ir::FusedFunction latencyKernel(int i) {
  std::string c = std::to_string(i + 2) + "f";
  return fused("def @main(%x: Tensor[(?, 64), float32], %b: Tensor[(64,), float32]) { tanh(%x * " + c +
                   " + %b) * sigmoid(%x) }",
               "lat" + std::to_string(i));
}
constexpr int kLatencyKernels = 15;

// Milliseconds to get each latency kernel from the cache (compiling, or loading
// from disk); `fromDisk` counts the kernels that came from the disk cache.
std::vector<double> timeLatencyKernels(int* fromDisk) {
  std::vector<double> ms;
  for (int i = 0; i < kLatencyKernels; ++i) {
    auto f = latencyKernel(i);
    auto t0 = bench::Clock::now();
    auto k = jit::KernelCache::global().get(f);
    ms.push_back(bench::secondsSince(t0) * 1e3);
    *fromDisk += k->fromDiskCache() ? 1 : 0;
  }
  return ms;
}

// `kernel_bench --warm DIR`: a second process loading the latency kernels from the disk cache.
int warmStart(const std::string& dir) {
  jit::KernelCache::global().setDiskCacheDir(dir);
  int fromDisk = 0;
  std::vector<double> ms = timeLatencyKernels(&fromDisk);
  if (fromDisk != kLatencyKernels) std::printf("only %d of %d kernels were in the disk cache\n", fromDisk, kLatencyKernels);
  std::printf("JIT warm start from the disk cache (second process): median %.3f ms per kernel, first %.3f ms (target <= 1 ms)\n",
              median(ms), ms[0]);
  return 0;
}

// A kernel on one thread and on `threads`, timed alternately, best of 30 each
// (short runs: many, so a stolen slice of a core does not count, and drifts in
// the machine's speed hit both figures of the speed-up alike). Returns seconds.
template <class F>
std::pair<double, double> bestOneAndAll(int threads, F&& run) {
  double one = 1e30, all = 1e30;
  for (int r = 0; r < 30; ++r) {
    for (int t : {1, threads}) {
      device::setNumThreads(t);
      run();  // untimed: a change of thread count starts the pool's workers
      auto t0 = bench::Clock::now();
      run();
      (t == 1 ? one : all) = std::min(t == 1 ? one : all, bench::secondsSince(t0));
    }
  }
  return {one, all};
}

}  // namespace

// --tuning-log LOG: each product with the default schedule and with the log's
// (bench/kernel_products.relay tuned by kiln-tune), timed alternately in this run.
int compareTuned(const std::string& logPath) {
  auto log = std::make_shared<const jit::TuningLog>(jit::TuningLog::load(logPath));
  for (const std::string& note : log->notes()) std::printf("note: %s\n", note.c_str());
  jit::KernelCache plain, tuned;
  tuned.setTuningLog(log);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-2, 2);
  auto filled = [&](std::initializer_list<int64_t> shape) {
    Tensor t = Tensor::empty(DType::Float32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
    return t;
  };
  const int64_t n = int64_t(16) << 20;
  struct Product {
    const char* name;
    const char* src;
    std::vector<Tensor> in;
    std::vector<int64_t> out;
  };
  Tensor m = filled({4096, 4096});
  std::vector<Product> products = {
      {"element-wise chain 16M", "def @main(%x: Tensor[(?,), float32], %y: Tensor[(?,), float32]) { sigmoid(%x * %y + 1f) * %x - %y }",
       {filled({n}), filled({n})}, {n}},
      {"row softmax 4096x4096", "def @main(%x: Tensor[(?, 4096), float32]) { nn.softmax(%x, axis=-1) }", {m}, {4096, 4096}},
      {"row sum 4096x4096", "def @main(%x: Tensor[(?, 4096), float32]) { sum(%x, axis=[1]) }", {m}, {4096}},
      {"dense 512x512x512", "def @main(%x: Tensor[(?, 512), float32], %w: Tensor[(512, 512), float32]) { nn.dense(%x, %w) }",
       {filled({512, 512}), filled({512, 512})}, {512, 512}},
      {"conv2d 1x64x56x56 3x3", "def @main(%x: Tensor[(1, 64, 56, 56), float32], %w: Tensor[(64, 64, 3, 3), float32]) { nn.conv2d(%x, %w, padding=[1, 1]) }",
       {filled({1, 64, 56, 56}), filled({64, 64, 3, 3})}, {1, 64, 56, 56}},
  };
  std::printf("%-24s %-18s %-34s %11s %11s %8s\n", "product", "task", "schedule", "default ms", "tuned ms", "speedup");
  for (const Product& p : products) {
    kernel_ir::FusedFunction f = fused(p.src, "product");
    auto base = plain.get(f);
    auto fast = tuned.get(f);
    std::vector<const Tensor*> refs;
    for (const Tensor& t : p.in) refs.push_back(&t);
    const jit::CompiledKernel& variant = fast->variantFor(jit::CompiledKernel::TensorRefs(refs.data(), refs.size()));
    std::vector<Tensor> out{Tensor::empty(DType::Float32, std::span<const int64_t>(p.out))};
    std::vector<double> a, b;
    for (int r = 0; r < 15; ++r) {
      for (int side = 0; side < 2; ++side) {
        const jit::CompiledKernel& k = side == (r & 1) ? *base : variant;
        auto t0 = bench::Clock::now();
        k.run(p.in, out);
        (&k == base.get() ? a : b).push_back(bench::secondsSince(t0) * 1e3);
      }
    }
    std::string schedule = log->hasTask(jit::taskKey(f)) ? variant.schedule().toString() : "(no record)";
    std::printf("%-24s %-18s %-34s %11.3f %11.3f %7.2fx\n", p.name, jit::taskKey(f).c_str(), schedule.c_str(), median(a),
                median(b), median(a) / median(b));
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--warm") return warmStart(argv[2]);
  if (argc == 3 && std::string(argv[1]) == "--tuning-log") return compareTuned(argv[2]);
  if (argc == 2 && std::string(argv[1]) == "--jit-only") {
    int cold = 0;
    std::printf("JIT latency, element-wise kernel (tanh(x*c+b)*sigmoid(x), IR to callable): median %.1f ms (target <= 15 ms)\n",
                median(timeLatencyKernels(&cold)));
    return 0;
  }
  int threads = device::numThreads();
  double bw1 = bench::copyBandwidth();
  double bw = bench::copyBandwidthThreads(threads);
  double peak = bench::fp32Peak();
  std::printf("machine: copy bandwidth %.1f GB/s (one thread), %.1f GB/s (%d threads); FP32 peak %.1f GFLOP/s (one core)\n",
              bw1 / 1e9, bw / 1e9, threads, peak / 1e9);
  std::printf("kernels below run on %d threads; bandwidth ratios are against the %d-thread copy loop, timed\n"
              "alternately with each kernel (best of each; the machine's speed drifts)\n\n", threads, threads);

  // Fused element-wise chain on 16M float32: reads x and y, writes one result.
  const int64_t n = int64_t(16) << 20;
  auto k = jit::KernelCache::global().get(
      fused("def @main(%x: Tensor[(?,), float32], %y: Tensor[(?,), float32]) { sigmoid(%x * %y + 1f) * %x - %y }", "chain"));
  Tensor x = Tensor::empty(DType::Float32, {n}), y = Tensor::empty(DType::Float32, {n});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-2, 2);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = d(rng), y.data<float>()[i] = d(rng);
  std::vector<Tensor> in{x, y};
  std::vector<Tensor> out{Tensor::empty(DType::Float32, {n})};
  k->run(in, out);
  bench::CopyLoop copy;
  auto [best, bwNow] = bench::bestAgainstCopy(copy, threads, 9, [&] { k->run(in, out); });
  double bytes = 3.0 * static_cast<double>(n) * sizeof(float);
  std::printf("fused element-wise chain, 16M float32 (sigmoid(x*y+1)*x-y): %.2f ms, %.1f GB/s = %.2f of copy bandwidth (%.1f GB/s alongside)\n",
              best * 1e3, bytes / best / 1e9, bytes / best / bwNow, bwNow / 1e9);

  // Row softmax and row sum over 4096 x 4096: one read of the input from memory
  // (a row stays in cache between the passes over it) and one write of the result.
  {
    const int64_t rows = 4096, cols = 4096;
    Tensor m = Tensor::empty(DType::Float32, {rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) m.data<float>()[i] = d(rng);
    std::vector<Tensor> min{m};
    struct Case {
      const char* name;
      const char* body;
      std::initializer_list<int64_t> out;
      double bytes;
    };
    const Case cases[] = {
        {"row softmax 4096x4096", "nn.softmax(%x, axis=-1)", {rows, cols}, 2.0 * rows * cols * 4},
        {"row sum 4096x4096", "sum(%x, axis=[1])", {rows}, 1.0 * rows * cols * 4},
    };
    for (const Case& c : cases) {
      auto rk = jit::KernelCache::global().get(
          fused(std::string("def @main(%x: Tensor[(?, 4096), float32]) { ") + c.body + " }", "reduce"));
      std::vector<Tensor> rout{Tensor::empty(DType::Float32, c.out)};
      rk->run(min, rout);
      auto [t, bwNow] = bench::bestAgainstCopy(copy, threads, 9, [&] { rk->run(min, rout); });
      std::printf("%s: %.2f ms, %.1f GB/s = %.2f of copy bandwidth (%.1f GB/s alongside)\n", c.name, t * 1e3,
                  c.bytes / t / 1e9, c.bytes / t / bwNow, bwNow / 1e9);
    }
  }

  // dense 512 x 512 x 512 float32 on one thread and on all, against FP32 peak.
  {
    const int64_t n512 = 512;
    Tensor a = Tensor::empty(DType::Float32, {n512, n512}), w = Tensor::empty(DType::Float32, {n512, n512});
    for (int64_t i = 0; i < n512 * n512; ++i) a.data<float>()[i] = d(rng), w.data<float>()[i] = d(rng);
    auto t0c = bench::Clock::now();
    auto dk = jit::KernelCache::global().get(
        fused("def @main(%x: Tensor[(?, 512), float32], %w: Tensor[(512, 512), float32]) { nn.dense(%x, %w) }", "dense"));
    double denseCompile = bench::secondsSince(t0c) * 1e3;
    std::vector<Tensor> din{a, w};
    std::vector<Tensor> dout{Tensor::empty(DType::Float32, {n512, n512})};
    double flops = 2.0 * n512 * n512 * n512;
    auto [one, all] = bestOneAndAll(threads, [&] { dk->run(din, dout); });
    for (int t : {1, threads}) {
      double gf = flops / (t == 1 ? one : all) / 1e9;
      std::printf("dense 512x512x512 float32, %d thread(s): %.1f GFLOP/s = %.2f of one core's FP32 peak%s\n", t, gf,
                  gf * 1e9 / peak, t > 1 ? (" (" + std::to_string(one / all).substr(0, 4) + "x one thread)").c_str() : "");
    }
    std::printf("JIT latency, dense kernel (IR to callable): %.1f ms (target <= 40 ms)\n", denseCompile);

    // conv2d 1x64x56x56, 64 3x3 filters, padding 1.
    Tensor x = Tensor::empty(DType::Float32, {1, 64, 56, 56}), cw = Tensor::empty(DType::Float32, {64, 64, 3, 3});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
    for (int64_t i = 0; i < cw.numel(); ++i) cw.data<float>()[i] = d(rng);
    auto ck = jit::KernelCache::global().get(fused(
        "def @main(%x: Tensor[(1, 64, 56, 56), float32], %w: Tensor[(64, 64, 3, 3), float32]) { nn.conv2d(%x, %w, padding=[1, 1]) }",
        "conv"));
    std::vector<Tensor> cin{x, cw};
    std::vector<Tensor> cout{Tensor::empty(DType::Float32, {1, 64, 56, 56})};
    // Counted as the direct form's FLOPs: minimal filtering (jit/conv2d_winograd.cc)
    // computes fewer products, so the figure may pass the peak.
    double cflops = 2.0 * 64 * 56 * 56 * 64 * 9;
    // Against the peak of the cores used: one thread against one core, all threads against all cores.
    auto [cone, call] = bestOneAndAll(threads, [&] { ck->run(cin, cout); });
    for (int t : {1, threads}) {
      double best = t == 1 ? cone : call;
      std::printf("conv2d 1x64x56x56, 64 3x3 filters, pad 1, %d thread(s): %.1f GFLOP/s (direct-form FLOPs) = %.2f of %s FP32 peak\n", t,
                  cflops / best / 1e9, cflops / best / (peak * t), t == 1 ? "one core's" : "those cores'");
    }
  }

  // JIT latency: fused function to callable, for fresh element-wise kernels, with
  // the disk cache on (so a second process can measure the warm start).
  std::string dir = (std::filesystem::temp_directory_path() / ("kiln_bench_cache_" + std::to_string(::getpid()))).string();
  jit::KernelCache::global().setDiskCacheDir(dir);
  int cold = 0;
  std::vector<double> ms = timeLatencyKernels(&cold);
  std::printf("JIT latency, element-wise kernel (tanh(x*c+b)*sigmoid(x), IR to callable): median %.1f ms (target <= 15 ms)\n",
              median(ms));
  std::fflush(stdout);
  std::string cmd = std::string("\"") + argv[0] + "\" --warm \"" + dir + "\"";
  if (std::system(cmd.c_str()) != 0) std::printf("warm-start measurement failed\n");
  std::filesystem::remove_all(dir);
  return 0;
}
