// kiln::Runtime: caches, thread pools and kernel tables per Runtime; the default
// Runtime; contention for a pool counted, not blocking.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "device/thread_pool.h"
#include "jit/kernel.h"
#include "kiln/compile.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"
#include "runtime/kernel_table.h"

namespace {

using kiln::Runtime;
using kiln::RuntimeOptions;
using kiln::Tensor;
using kiln::Value;

// One element-wise kernel over 512x512: large enough to share out among threads.
constexpr const char* kWide = R"(
def @main(%x: Tensor[(512, 512), float32]) { tanh(%x) * 2f + 1f }
)";

Tensor ramp() {
  Tensor t = Tensor::empty(kiln::DType::Float32, {512, 512});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % 97) * 0.01f;
  return t;
}

std::atomic<bool> gHold{false}, gHeld{false};
// A task that keeps the pool busy until released.
void holdPool(void* const*, const int64_t*, int64_t, int64_t) {
  gHeld = true;
  while (gHold.load()) std::this_thread::yield();
}

}  // namespace

TEST_CASE("runtime: two runtimes keep their own caches - VMs of one runtime share its kernel table") {
  auto exe = kiln::compile(kWide, "wide.relay");
  auto a = Runtime::create(), b = Runtime::create();
  kiln::VMOptions oa, ob;
  oa.runtime = a;
  ob.runtime = b;
  kiln::VirtualMachine va(exe, oa), va2(exe, oa), vb(exe, ob);
  Value x(ramp());
  Value ra = va.invoke("main", {x}), rb = vb.invoke("main", {x});
  CHECK(ra.tensor().data<float>()[1000] == doctest::Approx(std::tanh(static_cast<float>(1000 % 97) * 0.01f) * 2 + 1));
  CHECK(rb.tensor().data<float>()[1000] == ra.tensor().data<float>()[1000]);
  CHECK(a->stats().kernelCompiles == 1);
  CHECK(b->stats().kernelCompiles == 1);
  // The second VM of `a` finds the kernel in the shared table: no new request reaches the cache.
  uint64_t hits = a->stats().kernelCacheHits;
  va2.invoke("main", {x});
  CHECK(a->stats().kernelCompiles == 1);
  CHECK(a->stats().kernelCacheHits == hits);
  CHECK(a->kernelTable(exe) == a->kernelTable(exe));
  CHECK(a->kernelTable(exe) != b->kernelTable(exe));
  CHECK(&va.runtime() == a.get());
}

TEST_CASE("runtime: a VM without one uses the process default, whose cache is the global one") {
  auto exe = kiln::compile(kWide, "wide.relay");
  kiln::VirtualMachine vm(exe);
  CHECK(&vm.runtime() == Runtime::processDefault().get());
  CHECK(&Runtime::processDefault()->kernelCache() == &kiln::jit::KernelCache::global());
  CHECK(Runtime::processDefault()->threadPool() == nullptr);  // the process default pool
}

TEST_CASE("runtime: each runtime's parallel loops run on its own pool") {
  auto exe = kiln::compile(kWide, "wide.relay");
  RuntimeOptions two, one;
  two.numThreads = 2;
  one.numThreads = 1;
  auto wide = Runtime::create(two), narrow = Runtime::create(one);
  CHECK(wide->stats().threads == 2);
  CHECK(narrow->stats().threads == 1);
  kiln::VMOptions ow, on;
  ow.runtime = wide;
  on.runtime = narrow;
  kiln::VirtualMachine vw(exe, ow), vn(exe, on);
  Value x(ramp());
  Value rw = vw.invoke("main", {x}), rn = vn.invoke("main", {x});
  CHECK(rw.tensor().data<float>()[262143] == rn.tensor().data<float>()[262143]);
  CHECK(wide->stats().parallelLoops >= 1);
  CHECK(narrow->stats().parallelLoops == 0);
}

TEST_CASE("runtime: a loop that finds the pool busy runs inline and is counted") {
  auto exe = kiln::compile(kWide, "wide.relay");
  RuntimeOptions two;
  two.numThreads = 2;
  auto rt = Runtime::create(two);
  kiln::VMOptions o;
  o.runtime = rt;
  kiln::VirtualMachine vm(exe, o);
  Value x(ramp());
  vm.invoke("main", {x});  // compiled, and run once with the pool free
  int64_t before = rt->stats().busyInline;
  gHold = true;
  gHeld = false;
  std::thread holder([&] { rt->threadPool()->parallelFor(8, int64_t(1) << 20, holdPool, nullptr, nullptr); });
  while (!gHeld.load()) std::this_thread::yield();
  Value r = vm.invoke("main", {x});  // the pool is busy: the loop runs on this thread, never waiting
  gHold = false;
  holder.join();
  CHECK(rt->stats().busyInline == before + 1);
  CHECK(r.tensor().data<float>()[5] == doctest::Approx(std::tanh(0.05f) * 2 + 1));
}

TEST_CASE("runtime: a runtime's disk cache is its own directory") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_runtime_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RuntimeOptions withDisk;
  withDisk.kernelCacheDir = dir.string();
  auto rt = Runtime::create(withDisk);
  CHECK(rt->options().kernelCacheDir == dir.string());
  // A kernel no other test compiles: this process has no code for it yet,
  // whichever tests ran before in it.
  auto exe = kiln::compile("def @main(%x: Tensor[(512, 512), float32]) { tanh(%x) * 3f + 0.5f }", "disk.relay");
  kiln::VMOptions o;
  o.runtime = rt;
  kiln::VirtualMachine vm(exe, o);
  vm.invoke("main", {Value(ramp())});
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  CHECK(files >= 1);
  CHECK(rt->stats().codegenCompiles == 1);
  // A fresh runtime over the same directory compiles nothing: the code is this
  // process's already (across processes it comes from the directory: ctest disk_cache).
  auto again = Runtime::create(withDisk);
  o.runtime = again;
  kiln::VirtualMachine vm2(exe, o);
  vm2.invoke("main", {Value(ramp())});
  CHECK(again->stats().kernelCompiles == 1);
  CHECK(again->stats().codegenCompiles == 0);
  fs::remove_all(dir);
}

TEST_CASE("runtime: constant weights are packed once per executable and shared by every VM") {
  // A dense layer at batch 3 and a matmul at batch 1 over constant weights
  // (K = 37: not a multiple of the vector width), a `?` batch in the second.
  constexpr const char* kLayers = R"(
def @main(%x: Tensor[(3, 37), float32], %y: Tensor[(?, 19), float32], %w: Tensor[(21, 37), float32],
          %v: Tensor[(19, 45), float32], %img: Tensor[(1, 4, 9, 9), float32], %f: Tensor[(6, 2, 3, 3), float32]) {
  (nn.relu(nn.dense(%x, %w, units=21)), nn.matmul(%y, %v), nn.conv2d(%img, %f, padding=[1, 1, 1, 1], groups=2))
}
)";
  auto fill = [](std::initializer_list<int64_t> shape, float scale) {
    Tensor t = Tensor::empty(kiln::DType::Float32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(static_cast<float>(i) * scale);
    return t;
  };
  Tensor w = fill({21, 37}, 0.37f), v = fill({19, 45}, 0.11f), x = fill({3, 37}, 0.7f), y = fill({1, 19}, 0.3f);
  Tensor img = fill({1, 4, 9, 9}, 0.21f), f = fill({6, 2, 3, 3}, 0.53f);
  kiln::CompileOptions options;
  options.params = {{"w", w}, {"v", v}, {"f", f}};
  auto exe = kiln::compile(kLayers, "layers.relay", options);
  size_t imageBytes = exe->serialize().size();
  auto rt = Runtime::create();
  kiln::VMOptions vo;
  vo.runtime = rt;
  std::vector<std::unique_ptr<kiln::VirtualMachine>> vms;
  for (int i = 0; i < 8; ++i) vms.push_back(std::make_unique<kiln::VirtualMachine>(exe, vo));
  auto inUse = [&] {
    uint64_t bytes = 0;
    for (const auto& p : rt->pools()->stats()) bytes += p.bytesInUse;
    return bytes;
  };
  Value first;
  uint64_t afterFirst = 0;
  for (size_t i = 0; i < vms.size(); ++i) {
    Value r = vms[i]->invoke("main", {Value(x), Value(y), Value(img)});
    if (i == 0) {
      first = r;
      afterFirst = inUse();
    }
    for (int field = 0; field < 3; ++field) {
      Tensor got = r.fields()[field].tensor(), want = first.fields()[field].tensor();
      for (int64_t e = 0; e < got.numel(); ++e) REQUIRE(got.data<float>()[e] == want.data<float>()[e]);
    }
  }
  auto stats = rt->kernelTable(exe)->preparedStats();
  CHECK(stats.count == 3);  // w (as n x k), v (as k x n), f (filters): one copy each for all 8 VMs
  CHECK(stats.bytes >= (21 * 37 + 19 * 45 + 6 * 18) * sizeof(float));
  CHECK(afterFirst >= stats.bytes);
  CHECK(inUse() == afterFirst);  // the other seven VMs added no packed copy
  CHECK(exe->serialize().size() == imageBytes);  // packed forms are the runtime's, not the executable's
  // Against the reference.
  Tensor d = first.fields()[0].tensor(), m = first.fields()[1].tensor();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 21; ++j) {
      double s = 0;
      for (int64_t p = 0; p < 37; ++p) s += double(x.data<float>()[i * 37 + p]) * w.data<float>()[j * 37 + p];
      CHECK(d.data<float>()[i * 21 + j] == doctest::Approx(std::max(s, 0.0)).epsilon(1e-4));
    }
  for (int64_t j = 0; j < 45; ++j) {
    double s = 0;
    for (int64_t p = 0; p < 19; ++p) s += double(y.data<float>()[p]) * v.data<float>()[p * 45 + j];
    CHECK(m.data<float>()[j] == doctest::Approx(s).epsilon(1e-4));
  }
  Tensor conv = first.fields()[2].tensor();  // 2 groups of 2 channels in, 3 filters out each
  for (int64_t o = 0; o < 6; ++o)
    for (int64_t yy = 0; yy < 9; ++yy)
      for (int64_t xx = 0; xx < 9; ++xx) {
        double s = 0;
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              int64_t iy = yy - 1 + ky, ix = xx - 1 + kx;
              if (iy < 0 || iy >= 9 || ix < 0 || ix >= 9) continue;
              s += double(f.data<float>()[((o * 2 + c) * 3 + ky) * 3 + kx]) *
                   img.data<float>()[((o / 3 * 2 + c) * 9 + iy) * 9 + ix];
            }
        CHECK(conv.data<float>()[(o * 9 + yy) * 9 + xx] == doctest::Approx(s).epsilon(1e-4));
      }
}

namespace {
std::atomic<int> gCovered[64];
std::atomic<int> gPiecesRun{0};
void countCover(void* const*, const int64_t*, int64_t begin, int64_t end) {
  gPiecesRun++;
  for (int64_t i = begin; i < end; ++i) gCovered[i]++;
}
}  // namespace

TEST_CASE("thread pool: an affine loop runs one piece per thread and covers every index once") {
  for (int threads : {2, 3, 5}) {
    kiln::device::ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64}) {
      for (int rep = 0; rep < 50; ++rep) {
        for (auto& c : gCovered) c = 0;
        gPiecesRun = 0;
        pool.parallelFor(n, int64_t(1) << 20, countCover, nullptr, nullptr, /*affine=*/true);
        for (int64_t i = 0; i < 64; ++i) REQUIRE(gCovered[i] == (i < n ? 1 : 0));
        // One piece per thread at most (n pieces when fewer indices than threads).
        CHECK(gPiecesRun.load() == std::min<int64_t>(n, threads));
      }
    }
  }
}

namespace {
// Each job's indices, counted per caller (buffers[0] points at the caller's counters).
void countCallerCover(void* const* buffers, const int64_t*, int64_t begin, int64_t end) {
  auto* counts = static_cast<std::atomic<int>*>(buffers[0]);
  for (int64_t i = begin; i < end; ++i) counts[i]++;
}
}  // namespace

TEST_CASE("thread pool: callers competing for one pool, affine and plain jobs of changing sizes, every index once") {
  // Jobs alternate affine (the claim word a bitmask) and plain (a counter) with
  // different piece counts, from several callers at once, so a new job is set up
  // while a worker is still leaving the last one: the window in which a late
  // worker once claimed a piece of the new job under the old generation (run
  // twice, counted twice: its caller then waited forever).
  kiln::device::ThreadPool pool(2);
  constexpr int kCallers = 3, kJobs = 20000;
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      std::atomic<int> counts[64];
      void* buffers[1] = {counts};
      for (int j = 0; j < kJobs; ++j) {
        int64_t n = 1 + (j * 7 + c * 5) % 64;
        for (auto& x : counts) x = 0;
        pool.parallelFor(n, int64_t(1) << 20, countCallerCover, buffers, nullptr, /*affine=*/(j + c) % 2 == 0);
        for (int64_t i = 0; i < 64; ++i)
          if (counts[i].load() != (i < n ? 1 : 0)) wrong++;
      }
    });
  for (auto& t : callers) t.join();
  CHECK(wrong.load() == 0);
}

namespace {
// Piece 0 (the caller's, in an affine job) returns at once; the others take
// buffers[1]'s microseconds, so the caller outwaits its spin and sleeps.
void slowOthers(void* const* buffers, const int64_t*, int64_t begin, int64_t end) {
  auto* counts = static_cast<std::atomic<int>*>(buffers[0]);
  int64_t micros = *static_cast<const int64_t*>(buffers[1]);
  if (begin > 0) std::this_thread::sleep_for(std::chrono::microseconds(micros));
  for (int64_t i = begin; i < end; ++i) counts[i]++;
}

// Piece 0 (the caller's) takes 200 us, time for a woken worker to claim its own;
// the others count themselves when a worker runs them (buffers: the caller's
// id, the count).
void callerWaits(void* const* buffers, const int64_t*, int64_t begin, int64_t) {
  if (begin == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  else if (std::this_thread::get_id() != *static_cast<const std::thread::id*>(buffers[0]))
    (*static_cast<std::atomic<int>*>(buffers[1]))++;
}
}  // namespace

TEST_CASE("thread pool: jobs reach sleeping workers, and a sleeping caller hears its job finish") {
  // The wake-ups are sent only to sleepers (a job's round trip otherwise moved
  // the mutex's cache line twice): jobs after idle gaps longer than the workers'
  // spin find them asleep, and pieces longer than the caller's spin find it
  // asleep. A lost wake-up would hang here (ctest's timeout), not pass.
  for (int threads : {2, 3}) {
    kiln::device::ThreadPool pool(threads);
    std::atomic<int> counts[8];
    for (int64_t micros : {0, 200, 2000}) {
      void* buffers[2] = {counts, &micros};
      for (int rep = 0; rep < 20; ++rep) {
        for (auto& x : counts) x = 0;
        if (rep % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(300));  // the workers fall asleep
        pool.parallelFor(threads, int64_t(1) << 20, slowOthers, buffers, nullptr, /*affine=*/true);
        for (int64_t i = 0; i < 8; ++i) REQUIRE(counts[i].load() == (i < threads ? 1 : 0));
      }
    }
    // The caller takes a sleeping worker's piece rather than wait, so results
    // alone would not show a worker that never woke. After an idle gap (the
    // workers asleep), jobs whose caller piece takes 200 us go on until a worker
    // has run a piece: a worker woken by the first one does within a few jobs,
    // or, on a loaded machine (ctest -j), once the scheduler runs it; one whose
    // wake-up was lost never does, and the 10 s run out.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> byWorkers{0};
    void* probe[2] = {&caller, &byWorkers};
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (byWorkers.load() == 0 && std::chrono::steady_clock::now() < until)
      pool.parallelFor(threads, int64_t(1) << 20, callerWaits, probe, nullptr, /*affine=*/true);
    CHECK(byWorkers.load() > 0);
  }
}
