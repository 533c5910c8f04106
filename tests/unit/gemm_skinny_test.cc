// The skinny GEMM: far-stream prefetching (when it turns on, and that products
// streamed with it give the result they give without it) and the one-row kernel
// that takes four panels at a time, with and without its own prefetches.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device/thread_pool.h"
#include "gemm_reference.h"
#include "jit/gemm.h"
#include "jit/gemm_internal.h"
#include "jit/host_cpu.h"

using namespace kiln;
using kiln::test::checkGemm;

namespace {

// Sets farStreamPrefetch for a test case; puts it, fourPanelPrefetch and the
// thread count back at the end, even when a REQUIRE leaves early.
struct PrefetchAndThreads {
  explicit PrefetchAndThreads(bool prefetch)
      : threads(device::numThreads()),
        prefetchBefore(jit::detail::farStreamPrefetch()),
        fourPanelBefore(jit::detail::fourPanelPrefetch()) {
    jit::detail::setFarStreamPrefetch(prefetch);
  }
  ~PrefetchAndThreads() {
    device::setNumThreads(threads);
    jit::detail::setFarStreamPrefetch(prefetchBefore);
    jit::detail::setFourPanelPrefetch(fourPanelBefore);
  }
  int threads;
  bool prefetchBefore, fourPanelBefore;
};

}  // namespace

TEST_CASE("skinny GEMM: a weight is far when over twice the L2 was streamed since its last stream began") {
  // farStream only records addresses and byte counts (nothing is read), so
  // three addresses stand for three weights: lines of one array, in slots of
  // their own (one weight taking another's slot would make it near).
  static const float lines[64 * 16] = {};
  std::vector<const float*> picked;
  for (int l = 0; l < 64 && picked.size() < 3; ++l) {
    const float* p = lines + 16 * l;
    bool alone = true;
    for (const float* q : picked) alone = alone && jit::detail::recentSlot(p, jit::detail::kFarStreamSlots) !=
                                                       jit::detail::recentSlot(q, jit::detail::kFarStreamSlots);
    if (alone) picked.push_back(p);
  }
  REQUIRE(picked.size() == 3);
  const float *x = picked[0], *y = picked[1], *z = picked[2];
  const int64_t far = static_cast<int64_t>(jit::detail::farStreamBytes());
  REQUIRE(far >= 2 * 64 * 1024);
  // Never streamed before on this thread: near (the default).
  CHECK_FALSE(jit::detail::farStream(x, far / 4));
  // Streamed again at once: its own last stream is all that came between.
  CHECK_FALSE(jit::detail::farStream(x, far / 4));
  // Then y and z, half the distance each: x's next stream is over it.
  CHECK_FALSE(jit::detail::farStream(y, far / 2));
  CHECK_FALSE(jit::detail::farStream(z, far / 2));
  CHECK(jit::detail::farStream(x, far / 4));
  // y began its last stream far/2 + far/2 + far/4 bytes ago: over the distance too.
  CHECK(jit::detail::farStream(y, 1));
  // x again: only y's 1 byte and its own far/4 since: near.
  CHECK_FALSE(jit::detail::farStream(x, far / 4));
}

TEST_CASE("skinny GEMM: prepacked weights streamed far (prefetched) give the same result as streamed near") {
  // Prepacked weights in turns, enough that even a thread's half of the ones
  // between two streams of a weight is over the far distance: from the second
  // round on each stream is far (prefetched, where the machine has AVX-512: on
  // any vendor's, since the test turns farStreamPrefetch on, which by default
  // holds on Intel cores only). The first round's result (near) is checked against
  // the double-precision reference, and every later one must equal it bit for
  // bit: prefetching changes which lines are asked for early, never a value.
  // n = 517 ends in a partial panel; k = 1001 is not a multiple of the slice.
  std::mt19937 rng(45);
  std::uniform_real_distribution<float> d(-1, 1);
  PrefetchAndThreads restore(true);
  const int64_t n = 517, k = 1001;
  const int64_t weightBytes = n * k * 4;
  const int weights = static_cast<int>(static_cast<int64_t>(jit::detail::farStreamBytes()) / (weightBytes / 2) + 2);
  std::vector<std::vector<float>> b(static_cast<size_t>(weights)), packed(static_cast<size_t>(weights));
  for (int w = 0; w < weights; ++w) {
    b[w].resize(static_cast<size_t>(k * n));
    for (float& v : b[w]) v = d(rng);
    packed[w].resize(static_cast<size_t>(jit::packedBFloats(k, n)));
    jit::packGemmB(b[w].data(), k, true, k, n, packed[w].data());
  }
  for (int threads : {1, 2})
    for (int64_t m : {1, 3, 8}) {
      device::setNumThreads(threads);
      CAPTURE(threads);
      CAPTURE(m);
      std::vector<float> a(static_cast<size_t>(m * k));
      for (float& v : a) v = d(rng);
      std::vector<float> bias(static_cast<size_t>(n));
      for (float& v : bias) v = d(rng);
      std::vector<std::vector<float>> first(static_cast<size_t>(weights));
      std::vector<float> zero(static_cast<size_t>(m * n), 0.0f);
      for (int round = 0; round < 3; ++round)
        for (int w = 0; w < weights; ++w) {
          std::vector<float> c(static_cast<size_t>(m * n), 7.0f);
          jit::sgemmPacked(m, n, k, a.data(), k, false, b[w].data(), k, true, packed[w].data(), c.data(), n, false,
                           jit::GemmPost{bias.data(), true});
          if (round == 0) {
            checkGemm(c, zero, a, b[w], m, n, k, false, true, false, bias.data(), true);
            first[w] = c;
          } else {
            CHECK(c == first[w]);
          }
        }
    }
}

TEST_CASE("skinny GEMM: one row by four whole panels at a time, with the tail panels, both ways, on 1 and 2 threads") {
  // Prepacked, near (not prefetched) and one row: runPanels takes whole 32-wide
  // panels four at a time (skinnyFourPanels512 on AVX-512) and the rest one at a
  // time, in each thread's part. n = 128 is one group; 160 a group and a panel;
  // 300 ends in a partial panel; 517 gives each of two threads groups and tails.
  // k = 1 and 15 have no 16-step block, 37 a remainder. Each product is called
  // three times (its panels forwards, backwards, forwards: turnAround), each
  // against the double-precision reference, C accumulated or not, with bias and
  // ReLU in turns. The four-panel kernel's own prefetches (fourPanelPrefetch)
  // change no bit: each call runs with them and without, and the two agree.
  std::mt19937 rng(46);
  std::uniform_real_distribution<float> d(-1, 1);
  PrefetchAndThreads restore(false);
  int cases = 0;
  for (int threads : {1, 2})
    for (int64_t n : {128, 160, 300, 517})
      for (int64_t k : {1, 15, 16, 37, 256}) {
        device::setNumThreads(threads);
        ++cases;
        bool acc = cases % 3 == 0, relu = cases % 2 == 0;
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(acc);
        CAPTURE(relu);
        std::vector<float> a(static_cast<size_t>(k)), b(static_cast<size_t>(k * n)), bias(static_cast<size_t>(n)),
            c0(static_cast<size_t>(n));
        for (float& v : a) v = d(rng);
        for (float& v : b) v = d(rng);
        for (float& v : bias) v = d(rng);
        for (float& v : c0) v = d(rng);
        std::vector<float> packed(static_cast<size_t>(jit::packedBFloats(k, n)));
        jit::packGemmB(b.data(), n, false, k, n, packed.data());
        for (int call = 0; call < 3; ++call) {
          CAPTURE(call);
          std::vector<float> results[2];
          // Calls alternate direction (turnAround): the two settings take turns going first.
          for (bool prefetchFour : {call % 2 == 1, call % 2 == 0}) {
            jit::detail::setFourPanelPrefetch(prefetchFour);
            std::vector<float>& c = results[prefetchFour] = c0;
            jit::sgemmPacked(1, n, k, a.data(), k, false, b.data(), n, false, packed.data(), c.data(), n, acc,
                             jit::GemmPost{cases % 4 != 1 ? bias.data() : nullptr, relu});
            checkGemm(c, c0, a, b, 1, n, k, false, false, acc, cases % 4 != 1 ? bias.data() : nullptr, relu);
          }
          CHECK(results[0] == results[1]);
        }
      }
}

TEST_CASE("skinny GEMM: the four-panel prefetches are on by default on AMD family 0x1a (Zen 5) alone") {
  // hostCpuAmdFamily reads cpuid as the fingerprint does: a family there only
  // where the vendor is AMD, and the same number.
  const std::string& cpu = jit::hostCpuFingerprint();
  unsigned family = jit::hostCpuAmdFamily();
  size_t at = cpu.find("|AuthenticAMD|f");
  if (at == std::string::npos) {
    CHECK(family == 0);
  } else {
    CHECK(family == std::stoul(cpu.substr(at + 15)));
  }
  CHECK(jit::detail::fourPanelPrefetch() == (family >= 0x1a));
}
