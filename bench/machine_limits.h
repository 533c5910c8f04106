// The machine's limits, measured in the same run as a benchmark so every figure
// can be printed as a ratio: memory copy bandwidth and one core's FP32 FMA peak.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "device/cpu_limits.h"
#include "device/thread_pool.h"

namespace kiln::bench {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The fastest of `reps` runs of `f`, in seconds.
template <class F>
double bestSeconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, secondsSince(t0));
  }
  return best;
}

// The fastest run of each of `fs`, the functions taking turns for `rounds`
// rounds: figures that are subtracted from one another then come from the same
// stretch of machine time (on a shared machine the speed drifts by tens of
// percent between stretches, and a difference of separately timed figures drifts
// with it).
template <class... F>
std::array<double, sizeof...(F)> bestSecondsAlternating(int rounds, F&&... fs) {
  std::array<double, sizeof...(F)> best;
  best.fill(1e30);
  for (int r = 0; r < rounds; ++r) {
    size_t i = 0;
    auto once = [&](auto& f) {
      auto t0 = Clock::now();
      f();
      best[i] = std::min(best[i], secondsSince(t0));
      ++i;
    };
    (once(fs), ...);
  }
  return best;
}

// Best-of-N bytes/s of a plain copy loop over `floats` elements (read + write counted).
inline double copyBandwidth(size_t floats = size_t(16) << 20, int reps = 7) {
  std::vector<float> a(floats, 1.0f), b(floats, 0.0f);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    float* __restrict dst = b.data();
    const float* __restrict src = a.data();
    for (size_t i = 0; i < floats; ++i) dst[i] = src[i];
    best = std::min(best, secondsSince(t0));
    a[static_cast<size_t>(r)] = b[floats - 1 - static_cast<size_t>(r)];  // keep the loop alive
  }
  return 2.0 * static_cast<double>(floats) * sizeof(float) / best;
}

// The copy split over threads (each copying its own contiguous part), on buffers
// kept between runs, so it can also be timed alternately with a kernel (see
// bestAgainstCopy).
class CopyLoop {
 public:
  explicit CopyLoop(size_t floats = size_t(16) << 20) : a_(floats, 1.0f), b_(floats, 0.0f) {}
  // Seconds for one copy of all the floats over `threads` threads.
  double once(int threads) {
    std::vector<std::thread> ts;
    auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        size_t n = a_.size();
        size_t begin = n * static_cast<size_t>(t) / static_cast<size_t>(threads);
        size_t end = n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
        float* __restrict dst = b_.data();
        const float* __restrict src = a_.data();
        for (size_t i = begin; i < end; ++i) dst[i] = src[i];
      });
    for (auto& t : ts) t.join();
    double s = secondsSince(t0);
    a_[0] = b_[a_.size() - 1];  // keep the loop alive
    return s;
  }
  double bytes() const { return 2.0 * static_cast<double>(a_.size()) * sizeof(float); }

 private:
  std::vector<float> a_, b_;
};

// A kernel and the copy loop timed alternately, best of `reps` each: on a shared
// machine whose speed drifts (other tenants, clocks), both figures of a ratio
// then come from the same stretch of time. Returns {kernel seconds, copy bytes/s}.
template <class F>
std::pair<double, double> bestAgainstCopy(CopyLoop& copy, int threads, int reps, F&& kernel) {
  double k = 1e30, c = 1e30;
  for (int r = 0; r < reps; ++r) {
    c = std::min(c, copy.once(threads));
    auto t0 = Clock::now();
    kernel();
    k = std::min(k, secondsSince(t0));
  }
  return {k, copy.bytes() / c};
}

// Best-of-N bytes/s of the copy split over `threads` threads.
inline double copyBandwidthThreads(int threads, size_t floats = size_t(16) << 20, int reps = 7) {
  CopyLoop copy(floats);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) best = std::min(best, copy.once(threads));
  return copy.bytes() / best;
}

// FP32 FLOP/s of one core with fused multiply-adds in registers (AVX-512 where present).
inline double fp32Peak() { return device::fp32PeakPerCore(); }

// What an affine loop shared over a pool of `threads` costs beyond its work, in
// ns (median): every thread's piece busy for the same 2 us, so that each thread
// runs its own, the loop's time less 2 us is its start on the slowest thread and
// its finish, trips of cache lines between cores. A loop whose every step splits
// its work over the threads (an LSTM step's product) pays it per step, where the
// floors' read loops, each thread reading its part of every step unsynchronized,
// pay none: on a machine with slow core-to-core trips it sets how near two
// threads can come to the floor.
inline double parallelOverheadNanos(int threads, int blocks = 21, int perBlock = 200) {
  static constexpr auto kWork = std::chrono::microseconds(2);
  device::ThreadPool pool(threads);
  device::ParallelTask busy = [](void* const*, const int64_t*, int64_t, int64_t) {
    auto until = Clock::now() + kWork;
    while (Clock::now() < until) {
    }
  };
  std::vector<double> ns;
  for (int b = 0; b < blocks; ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < perBlock; ++i) pool.parallelFor(threads, int64_t(1) << 30, busy, nullptr, nullptr, /*affine=*/true);
    ns.push_back(secondsSince(t0) * 1e9 / perBlock - std::chrono::duration<double, std::nano>(kWork).count());
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

}  // namespace kiln::bench
