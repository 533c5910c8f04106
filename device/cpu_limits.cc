// FMA peak, read- and write-loop timings: the machine's limits, measured (cpu_limits.h).
#include "device/cpu_limits.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace kiln::device {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

__attribute__((target("avx512f"))) float readOnce512(const float* p, size_t n) {
  __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a = _mm512_add_ps(a, _mm512_loadu_ps(p + i));
    b = _mm512_add_ps(b, _mm512_loadu_ps(p + i + 16));
    c = _mm512_add_ps(c, _mm512_loadu_ps(p + i + 32));
    d = _mm512_add_ps(d, _mm512_loadu_ps(p + i + 48));
  }
  for (; i + 16 <= n; i += 16) a = _mm512_add_ps(a, _mm512_loadu_ps(p + i));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
  float s = 0;
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += p[i];
  return s;
}

__attribute__((target("avx2"))) float readOnce256(const float* p, size_t n) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) acc[q] = _mm256_add_ps(acc[q], _mm256_loadu_ps(p + i + 8 * q));
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(p + i));
  for (int q = 1; q < 8; ++q) acc[0] = _mm256_add_ps(acc[0], acc[q]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += p[i];
  return s;
}

// n floats (a multiple of 16, at a 64-byte boundary) stored with plain vector
// stores (the line is read for ownership first, unless the core elides it) or
// streaming ones (written around the caches).
__attribute__((target("avx512f"))) void writeOnce512(float* p, size_t n, bool streaming) {
  const __m512 v = _mm512_set1_ps(1.0f);
  if (streaming) {
    for (size_t i = 0; i < n; i += 16) _mm512_stream_ps(p + i, v);
    _mm_sfence();
  } else {
    for (size_t i = 0; i < n; i += 16) _mm512_store_ps(p + i, v);
  }
}

__attribute__((target("avx2"))) void writeOnce256(float* p, size_t n, bool streaming) {
  const __m256 v = _mm256_set1_ps(1.0f);
  if (streaming) {
    for (size_t i = 0; i < n; i += 8) _mm256_stream_ps(p + i, v);
    _mm_sfence();
  } else {
    for (size_t i = 0; i < n; i += 8) _mm256_store_ps(p + i, v);
  }
}

void writeOnce(float* p, size_t n, bool streaming) {
  if (__builtin_cpu_supports("avx512f")) return writeOnce512(p, n, streaming);
  if (__builtin_cpu_supports("avx2")) return writeOnce256(p, n, streaming);
  std::fill(p, p + n, 1.0f);
}

// `runs` timed passes over [0, floats), split into contiguous parts over
// `threads` threads that start each pass together; pass(t, begin, end, r) runs
// part t of pass r. The seconds of each pass: its slowest part's. Parts begin
// at multiples of `align` floats.
template <class Pass>
std::vector<double> timedSplit(size_t floats, int threads, size_t runs, size_t align, Pass&& pass) {
  size_t parts = std::min(static_cast<size_t>(std::clamp(threads, 1, 256)), std::max<size_t>(floats / align, 1));
  std::vector<double> seconds(runs * parts);
  std::atomic<size_t> arrived{0};
  auto work = [&](size_t t) {
    size_t begin = floats * t / parts / align * align, end = t + 1 == parts ? floats : floats * (t + 1) / parts / align * align;
    for (size_t r = 0; r < runs; ++r) {
      // Every part arrives before any starts pass r (so none is still in pass r - 1).
      arrived.fetch_add(1);
      while (arrived.load() < (r + 1) * parts) _mm_pause();
      auto t0 = Clock::now();
      pass(t, begin, end, r);
      seconds[r * parts + t] = secondsSince(t0);
    }
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < parts; ++t) helpers.emplace_back(work, t);
  work(0);
  for (auto& h : helpers) h.join();
  std::vector<double> out(runs);
  for (size_t r = 0; r < runs; ++r)
    out[r] = *std::max_element(seconds.begin() + static_cast<ptrdiff_t>(r * parts),
                               seconds.begin() + static_cast<ptrdiff_t>((r + 1) * parts));
  return out;
}

// 12 independent accumulators hide the FMA latency; nothing touches memory in the
// loop (unrolled, so the accumulators stay in registers). Explicit FMAs: with
// -std=c++20 GCC does not contract a * b + c.
__attribute__((target("avx512f,fma"))) double fma512(long iters) {
  __m512 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k) * 1e-3f);
  __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  auto t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, a);
  }
  double s = secondsSince(t0);
  alignas(64) float lanes[16];
  volatile float sink = 0;
  for (int k = 0; k < 12; ++k) {
    _mm512_store_ps(lanes, acc[k]);
    sink = sink + lanes[0];
  }
  return 2.0 * 12 * 16 * static_cast<double>(iters) / s;
}

__attribute__((target("avx2,fma"))) double fma256(long iters) {
  __m256 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k) * 1e-3f);
  __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  auto t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, a);
  }
  double s = secondsSince(t0);
  alignas(32) float lanes[8];
  volatile float sink = 0;
  for (int k = 0; k < 12; ++k) {
    _mm256_store_ps(lanes, acc[k]);
    sink = sink + lanes[0];
  }
  return 2.0 * 12 * 8 * static_cast<double>(iters) / s;
}

// Two scalar FMA chains' worth of work per iteration, for machines with neither.
double fmaScalar(long iters) {
  volatile float sink = 0;
  float acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = static_cast<float>(k) * 1e-3f;
  auto t0 = Clock::now();
  for (long i = 0; i < iters; ++i)
    for (float& x : acc) x = x * 0.999999f + 1e-7f;
  double s = secondsSince(t0);
  for (float x : acc) sink = sink + x;
  return 2.0 * 12 * static_cast<double>(iters) / s;
}

constexpr double kLargestBuffer = 256.0 * 1024 * 1024;
constexpr size_t kBlockFloats = 4096;  // 16 KiB

// Passes over a small buffer timed together, so that a timed stretch covers at
// least 64 KiB: alone, a pass over a few KB is shorter than the clock's reads
// around it (a 2.5 KB read timed at 130 ns on a KVM guest, where kernels that
// read as much took 70), and the floor would not bound the kernel.
int repeatsFor(double bytes) { return bytes >= 65536 ? 1 : static_cast<int>(std::min(65536.0 / std::max(bytes, 1.0), 1024.0)); }

}  // namespace

float readOnce(const float* p, size_t n) {
  if (__builtin_cpu_supports("avx512f")) return readOnce512(p, n);
  if (__builtin_cpu_supports("avx2")) return readOnce256(p, n);
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

double fp32PeakPerCore(int reps, long iterations) {
  bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  double best = 0;
  for (int r = 0; r < std::max(reps, 1); ++r)
    best = std::max(best, avx512 ? fma512(iterations) : avx2 ? fma256(iterations) : fmaScalar(iterations / 8));
  return best;
}

std::vector<double> timedFmas(double flops, int threads, int reps) {
  bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // One iteration: 12 FMAs of 16 lanes (AVX-512), 8 (AVX2) or 1.
  double perIteration = 2.0 * 12 * (avx512 ? 16 : avx2 ? 8 : 1);
  if (!(flops > 0)) return std::vector<double>(static_cast<size_t>(std::max(reps, 0)), 0.0);
  size_t iterations = static_cast<size_t>(std::min(flops / perIteration, 1e15));
  auto run = [&](size_t, size_t begin, size_t end, size_t) {
    long n = static_cast<long>(end - begin);
    if (avx512) fma512(n);
    else if (avx2) fma256(n);
    else fmaScalar(n);
  };
  return timedSplit(std::max<size_t>(iterations, 1), threads, static_cast<size_t>(std::max(reps, 0)), 1, run);
}

std::vector<double> timedReads(const float* buf, size_t floats, int threads, int reps, int times, bool alternate) {
  std::vector<float> sums(static_cast<size_t>(std::clamp(threads, 1, 256)));  // per part: timedSplit makes at most this many
  auto read = [&](size_t t, size_t begin, size_t end, size_t r) {
    float sum = 0;
    for (int k = 0; k < times; ++k) {
      if (!alternate || r % 2 == 0) {
        sum += readOnce(buf + begin, end - begin);
        continue;
      }
      // Backwards by blocks: what the last read left in cache comes first (a
      // kernel that turns its weights around each call finds it there too).
      // The blocks are those of the forward read, so they start on whole vectors.
      for (size_t hi = end; hi > begin;) {
        size_t lo = begin + (hi - begin - 1) / kBlockFloats * kBlockFloats;
        sum += readOnce(buf + lo, hi - lo);
        hi = lo;
      }
    }
    sums[t] += sum;
  };
  std::vector<double> out = timedSplit(floats, threads, static_cast<size_t>(std::max(reps, 0)), 16, read);
  volatile float sink = 0;
  for (float v : sums) sink = sink + v;
  return out;
}

double readSeconds(double bytes, int threads, int reps) {
  if (!(bytes > 0)) return 0;
  double scale = bytes > kLargestBuffer ? bytes / kLargestBuffer : 1.0;
  size_t floats = static_cast<size_t>(std::min(bytes, kLargestBuffer) / sizeof(float)) + 1;
  AlignedFloats buf = alignedFloats(floats);
  std::fill(buf.get(), buf.get() + floats, 1.0f);
  // Read 0 brings the buffer into cache; the best of the rest.
  int times = repeatsFor(bytes);
  std::vector<double> reads = timedReads(buf.get(), floats, threads, std::max(reps, 1) + 1, times, true);
  return *std::min_element(reads.begin() + 1, reads.end()) * scale / times;
}

double writeSeconds(double bytes, int threads, int reps) {
  if (!(bytes > 0)) return 0;
  double scale = bytes > kLargestBuffer ? bytes / kLargestBuffer : 1.0;
  size_t floats = (static_cast<size_t>(std::min(bytes, kLargestBuffer) / sizeof(float)) + 15) / 16 * 16;
  AlignedFloats buf = alignedFloats(floats);
  std::memset(buf.get(), 0, floats * sizeof(float));
  double best = 0;
  int times = repeatsFor(bytes);
  for (bool streaming : {false, true}) {
    // Pass 0 warms the buffer (and its pages); the best of the rest.
    std::vector<double> writes = timedSplit(floats, threads, static_cast<size_t>(std::max(reps, 1)) + 1, 16,
                                            [&](size_t, size_t begin, size_t end, size_t) {
                                              for (int k = 0; k < times; ++k) writeOnce(buf.get() + begin, end - begin, streaming);
                                            });
    double w = *std::min_element(writes.begin() + 1, writes.end());
    best = best == 0 ? w : std::min(best, w);
  }
  return best * scale / times;
}

AlignedFloats alignedFloats(size_t n) {
  return AlignedFloats(static_cast<float*>(::operator new(std::max<size_t>(n, 1) * sizeof(float), std::align_val_t(64))));
}

double readWriteSeconds(double readBytes, double writeBytes, int threads, int reps) {
  if (!(readBytes > 0) || !(writeBytes > 0)) return std::max(readSeconds(readBytes, threads, reps), writeSeconds(writeBytes, threads, reps));
  double total = readBytes + writeBytes;
  double scale = total > kLargestBuffer ? total / kLargestBuffer : 1.0;
  // Blocks of at most about kWriteBlock floats written (whole vectors) and
  // kBlockFloats read, as readSeconds reads (so that a small result leaves the
  // pass a plain read), at least a few per thread where each then still reads
  // a few vectors (a block's call costs more than a vector's read).
  constexpr size_t kWriteBlock = 1024, kVector = 16;
  size_t writeFloats = (static_cast<size_t>(writeBytes / scale / sizeof(float)) + kVector - 1) / kVector * kVector;
  size_t readFloats = std::max<size_t>(1, static_cast<size_t>(readBytes / scale / sizeof(float)));
  size_t fewBlocks = std::min<size_t>(static_cast<size_t>(std::clamp(threads, 1, 256)) * 4, std::max<size_t>(readFloats / (4 * kVector), 1));
  size_t blocks = std::max({writeFloats / kWriteBlock, readFloats / kBlockFloats, fewBlocks});
  // Every block's part of each buffer starts on a whole vector (alignedFloats).
  AlignedFloats in = alignedFloats(readFloats), out = alignedFloats(writeFloats);
  std::fill(in.get(), in.get() + readFloats, 1.0f);
  std::memset(out.get(), 0, writeFloats * sizeof(float));
  std::vector<float> sums(static_cast<size_t>(std::clamp(threads, 1, 256)));  // per part, as timedReads keeps them
  auto block = [&](size_t b, bool streaming) {
    size_t r0 = readFloats / kVector * b / blocks * kVector,
           r1 = b + 1 == blocks ? readFloats : readFloats / kVector * (b + 1) / blocks * kVector;
    size_t w0 = writeFloats / kVector * b / blocks * kVector, w1 = writeFloats / kVector * (b + 1) / blocks * kVector;
    float s = readOnce(in.get() + r0, r1 - r0);
    if (w1 > w0) writeOnce(out.get() + w0, w1 - w0, streaming);
    return s;
  };
  double best = 0;
  int times = repeatsFor(total);
  for (bool streaming : {false, true}) {
    // Every other pass goes backwards by blocks, as readSeconds does: what the
    // last pass left in cache comes first.
    std::vector<double> passes = timedSplit(blocks, threads, static_cast<size_t>(std::max(reps, 1)) + 1, 1,
                                            [&](size_t t, size_t begin, size_t end, size_t r) {
                                              float s = 0;
                                              for (int k = 0; k < times; ++k) {
                                                if (r % 2 == 0)
                                                  for (size_t b = begin; b < end; ++b) s += block(b, streaming);
                                                else
                                                  for (size_t b = end; b-- > begin;) s += block(b, streaming);
                                              }
                                              sums[t] += s;
                                            });
    double p = *std::min_element(passes.begin() + 1, passes.end());
    best = best == 0 ? p : std::min(best, p);
  }
  volatile float sink = 0;
  for (float v : sums) sink = sink + v;
  return best * scale / times;
}

}  // namespace kiln::device
