// A loop after a one-row product that reads it by column groups runs in the
// product's threads (kernel_ir/gemm_epilogue.h, jit::GemmEpilogue): which loops
// qualify, that each thread's part of the loop sees its columns finished, and
// that LSTM programs give the reference's results with one thread and two,
// through the grouped path and through the fallback.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "device/thread_pool.h"
#include "jit/gemm.h"
#include "kernel_ir/gemm_epilogue.h"
#include "kernel_ir/lower.h"
#include "kernel_util.h"
#include "kiln/compile.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

using namespace kiln;

namespace {

// The groups epilogueColumnGroups finds for the first product of `src`'s
// kernel and the statement after it; 0 when it finds none (or there is none).
int64_t groupsOf(const std::string& src) {
  // Lowered as the CPU JIT lowers (a dense layer's bias and ReLU in the product).
  loop::LoopKernel k =
      kernel_ir::lowerToLoops(test::fusedFrom(src), {.directConv = true, .gemmPostOps = true, .splitBorders = true});
  const std::vector<loop::StmtId>& body = k.stmt(k.body).body;
  for (size_t i = 0; i + 1 < body.size(); ++i)
    if (k.stmt(body[i]).kind == loop::StmtKind::Gemm)
      return loop::epilogueColumnGroups(k, k.stmt(body[i]), k.stmt(body[i + 1])).value_or(0);
  return 0;
}

// An LSTM step's gates after the recurrent product: `rows` rows, hidden size h.
std::string gateProgram(int rows, int h) {
  std::string H = std::to_string(h), G = std::to_string(4 * h), R = std::to_string(rows);
  return "def @main(%h: Tensor[(" + R + ", " + H + "), float32], %w: Tensor[(" + G + ", " + H +
         "), float32], %b: Tensor[(" + G + "), float32], %c: Tensor[(" + R + ", " + H +
         "), float32]) {"
         "  let %s = split(nn.dense(%h, %w, units=" + G + ") + %b, indices_or_sections=4, axis=1);"
         "  let %c2 = sigmoid(%s.1) * %c + sigmoid(%s.0) * tanh(%s.2);"
         "  (%c2, sigmoid(%s.3) * tanh(%c2)) }";
}

}  // namespace

TEST_CASE("gemm epilogue: an LSTM step's gate loop reads its one-row product by four column groups") {
  CHECK(groupsOf(gateProgram(1, 64)) == 4);
  CHECK(groupsOf(gateProgram(1, 40)) == 4);  // the runtime decides whether groups are whole panels
  // A plain element-wise pass over a product's columns: one group.
  CHECK(groupsOf("def @main(%x: Tensor[(1, 32), float32], %w: Tensor[(96, 32), float32]) {"
                 "  tanh(nn.dense(%x, %w, units=96)) }") == 1);
  // Two rows: a thread's columns are not a loop iteration's (row-major C).
  CHECK(groupsOf(gateProgram(2, 64)) == 0);
}

TEST_CASE("gemm epilogue: a loop reading another column than its own, or a reduction of the product, stays after it") {
  // Reversed part: iteration j reads column 63 - j of group 2.
  CHECK(groupsOf("def @main(%h: Tensor[(1, 64), float32], %w: Tensor[(256, 64), float32]) {"
                 "  let %s = split(nn.dense(%h, %w, units=256), indices_or_sections=4, axis=1);"
                 "  sigmoid(%s.0) * reverse(%s.2, axis=1) }") == 0);
  // A product read at a shifted column: iteration j reads columns j and j + 1.
  CHECK(groupsOf("def @main(%h: Tensor[(1, 64), float32], %w: Tensor[(129, 64), float32]) {"
                 "  let %g = nn.dense(%h, %w, units=129);"
                 "  strided_slice(%g, begin=[0, 0], end=[1, 128]) * strided_slice(%g, begin=[0, 1], end=[1, 129]) }") ==
        0);
  // Bias and ReLU finished inside the product: no loop after it.
  CHECK(groupsOf("def @main(%x: Tensor[(1, 32), float32], %w: Tensor[(64, 32), float32], %b: Tensor[(64), float32]) {"
                 "  nn.relu(nn.bias_add(nn.dense(%x, %w, units=64), %b)) }") == 0);
  // A reduction over the product's columns: its iterations read every column.
  CHECK(groupsOf("def @main(%x: Tensor[(1, 32), float32], %w: Tensor[(64, 32), float32]) {"
                 "  sum(tanh(nn.dense(%x, %w, units=64)), axis=[1]) }") == 0);
}

TEST_CASE("gemm epilogue: each thread's part of the loop runs once, on columns already finished") {
  // The loop's task checks, when it runs, that every column it reads holds its
  // final value, and counts the iterations it ran. Groups of whole panels take
  // the grouped path; 40-column groups are not whole panels (the fallback: the
  // product, then the loop). A grain far below the default makes these small
  // products share out over the pool.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  int threadsBefore = device::numThreads();
  for (int threads : {1, 2, 3})
    for (int64_t columns : {int64_t(32), int64_t(96), int64_t(256), int64_t(40)})
      for (int64_t groups : {int64_t(1), int64_t(4)}) {
        device::setNumThreads(threads);
        CAPTURE(threads);
        CAPTURE(columns);
        CAPTURE(groups);
        const int64_t n = columns * groups, k = 67;
        std::vector<float> a(static_cast<size_t>(k)), b(static_cast<size_t>(n * k));
        for (float& v : a) v = d(rng);
        for (float& v : b) v = d(rng);
        std::vector<float> packed(static_cast<size_t>(jit::packedBFloats(k, n)));
        jit::packGemmB(b.data(), k, true, k, n, packed.data());
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) s += double(a[p]) * b[j * k + p];
          want[j] = s;
        }
        std::vector<float> c(static_cast<size_t>(n), NAN), out(static_cast<size_t>(columns), NAN);
        std::vector<std::atomic<int>> runs(static_cast<size_t>(columns));
        std::atomic<int> unfinished{0};
        struct Ctx {
          const std::vector<float>* c;
          const std::vector<double>* want;
          std::vector<float>* out;
          std::vector<std::atomic<int>>* runs;
          std::atomic<int>* unfinished;
          int64_t columns, groups;
        } ctx{&c, &want, &out, &runs, &unfinished, columns, groups};
        auto task = [](void* const* buffers, const int64_t*, int64_t begin, int64_t end) {
          const Ctx& x = *reinterpret_cast<const Ctx*>(buffers);
          for (int64_t j = begin; j < end; ++j) {
            double s = 0;
            for (int64_t g = 0; g < x.groups; ++g) {
              size_t at = static_cast<size_t>(g * x.columns + j);
              if (std::fabs((*x.c)[at] - (*x.want)[at]) > 1e-4) x.unfinished->fetch_add(1);
              s += (g + 1) * (*x.c)[at];
            }
            (*x.out)[static_cast<size_t>(j)] = static_cast<float>(s);
            (*x.runs)[static_cast<size_t>(j)].fetch_add(1);
          }
        };
        int64_t jobs = device::parallelJobsRun();
        device::underScopes(false, -12, [&] {
          jit::sgemmPackedThen(1, n, k, a.data(), k, b.data(), k, true, packed.data(), c.data(), n, {},
                               {task, reinterpret_cast<void* const*>(&ctx), nullptr, groups, columns * 4});
        });
        CHECK(unfinished.load() == 0);
        for (int64_t j = 0; j < columns; ++j) {
          CHECK(runs[static_cast<size_t>(j)].load() == 1);
          double s = 0;
          for (int64_t g = 0; g < groups; ++g) s += (g + 1) * want[static_cast<size_t>(g * columns + j)];
          CHECK(out[static_cast<size_t>(j)] == doctest::Approx(s).epsilon(1e-4));
        }
        for (int64_t j = 0; j < n; ++j) CHECK(c[static_cast<size_t>(j)] == doctest::Approx(want[j]).epsilon(1e-4));
        // Shared out whenever there are threads and more than one panel per group.
        if (threads > 1 && columns % 32 == 0 && columns > 32) CHECK(device::parallelJobsRun() > jobs);
      }
  device::setNumThreads(threadsBefore);
}

namespace {

// A PyTorch-style LSTM (input 24, hidden h) stepped `steps` times by a loop, its
// weights bound as constants (prepacked).
std::string lstmProgram(int steps, int h) {
  std::string H = std::to_string(h), G = std::to_string(4 * h), T = std::to_string(steps);
  return R"(
def @main(%xs: Tensor[()" + T + R"(, 1, 24), float32], %w_ih: Tensor[()" + G + R"(, 24), float32],
          %w_hh: Tensor[()" + G + ", " + H + R"(), float32], %b: Tensor[()" + G + R"(), float32]) {
  let %loop = fn (%t: int32, %h: Tensor[(1, )" + H + R"(), float32], %c: Tensor[(1, )" + H + R"(), float32]) {
    if (%t == )" + T + R"() {
      (%h, %c)
    } else {
      let %x = take(%xs, %t, axis=0);
      let %g = add(nn.bias_add(nn.dense(%x, %w_ih, units=)" + G + R"(), %b), nn.dense(%h, %w_hh, units=)" + G + R"());
      let %s = split(%g, indices_or_sections=4, axis=1);
      let %c2 = add(multiply(sigmoid(%s.1), %c), multiply(sigmoid(%s.0), tanh(%s.2)));
      let %h2 = multiply(sigmoid(%s.3), tanh(%c2));
      %loop(add(%t, 1), %h2, %c2)
    }
  };
  let %z = zeros(shape=[1, )" + H + R"(], dtype="float32");
  %loop(0, %z, %z)
}
)";
}

}  // namespace

TEST_CASE("gemm epilogue: LSTMs give the reference's states on one thread and two") {
  // Hidden 192: four groups of six 32-column panels, and a recurrent product
  // large enough to share out. Hidden 40: groups are not whole panels.
  for (int hidden : {192, 40}) {
    CAPTURE(hidden);
    const int steps = 3, in = 24, gates = 4 * hidden;
    std::mt19937 rng(static_cast<unsigned>(hidden));
    Tensor xs = test::randomTensor(DType::Float32, {steps, 1, in}, rng, -1, 1);
    Tensor wih = test::randomTensor(DType::Float32, {gates, in}, rng, -0.3, 0.3);
    Tensor whh = test::randomTensor(DType::Float32, {gates, hidden}, rng, -0.3, 0.3);
    Tensor b = test::randomTensor(DType::Float32, {gates}, rng, -0.3, 0.3);
    std::vector<double> h(static_cast<size_t>(hidden)), c(static_cast<size_t>(hidden));
    auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
    for (int t = 0; t < steps; ++t) {
      std::vector<double> g(static_cast<size_t>(gates));
      for (int j = 0; j < gates; ++j) {
        double s = test::getElement(b, j);
        for (int p = 0; p < in; ++p) s += test::getElement(xs, t * in + p) * test::getElement(wih, j * in + p);
        for (int p = 0; p < hidden; ++p) s += h[p] * test::getElement(whh, j * hidden + p);
        g[static_cast<size_t>(j)] = s;
      }
      for (int j = 0; j < hidden; ++j) {
        c[j] = sig(g[hidden + j]) * c[j] + sig(g[j]) * std::tanh(g[2 * hidden + j]);
        h[j] = sig(g[3 * hidden + j]) * std::tanh(c[j]);
      }
    }
    CompileOptions co;
    co.params = {{"w_ih", wih}, {"w_hh", whh}, {"b", b}};
    auto exe = compile(lstmProgram(steps, hidden), "lstm.relay", co);
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      RuntimeOptions ro;
      ro.numThreads = threads;
      VMOptions vo;
      vo.runtime = Runtime::create(ro);
      VirtualMachine vm(exe, vo);
      Value r = vm.invoke("main", {Value(xs)});
      REQUIRE(r.isTuple());
      Tensor hOut = r.fields()[0].tensor(), cOut = r.fields()[1].tensor();
      for (int j = 0; j < hidden; ++j) {
        CHECK(test::getElement(hOut, j) == doctest::Approx(h[j]).epsilon(1e-4));
        CHECK(test::getElement(cOut, j) == doctest::Approx(c[j]).epsilon(1e-4));
      }
    }
  }
}
