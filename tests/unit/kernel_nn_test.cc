// Linear algebra, convolution and pooling kernels against plain reference loops.
#include "jit/conv2d.h"
#include "jit/conv2d_internal.h"
#include "jit/gemm.h"
#include "device/thread_pool.h"
#include "kernel_ir/lower.h"
#include "gemm_reference.h"
#include "kernel_util.h"
#include "test_skip.h"

using namespace kiln;
using test::getElement;

namespace {

double at(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t flat = 0;
  size_t d = 0;
  for (int64_t i : index) flat = flat * t.shape()[d++] + i;
  return getElement(t, flat);
}

void checkApprox(const Tensor& got, const std::vector<double>& want, double eps = 1e-5) {
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(getElement(got, static_cast<int64_t>(i)) == doctest::Approx(want[i]).epsilon(eps).scale(1.0));
  }
}

std::vector<Tensor> run(const std::string& src, std::vector<Tensor> inputs) { return (*test::kernelFrom(src))(inputs); }

// 2-D pooling of every image and channel of `x` (n x c x h x w), in double:
// window kh x kw, strides, dilations, padding top/left (the output's size given),
// max (NaN if the window holds one) or average (over the whole window or over the
// elements inside the image).
struct PoolWindow {
  int64_t kh, kw, sh, sw, dh = 1, dw = 1, top = 0, left = 0;
};
std::vector<double> poolReference(const Tensor& x, const PoolWindow& p, int64_t oh, int64_t ow, bool max, bool includePad) {
  int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  std::vector<double> want;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double m = -INFINITY, sum = 0;
          bool nan = false;
          int count = 0;
          for (int64_t a = 0; a < p.kh; ++a)
            for (int64_t b = 0; b < p.kw; ++b) {
              int64_t ih = i * p.sh + a * p.dh - p.top, iw = j * p.sw + b * p.dw - p.left;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              double v = at(x, {img, ch, ih, iw});
              nan = nan || std::isnan(v);
              m = std::max(m, v);
              sum += v;
              ++count;
            }
          want.push_back(max ? (nan ? NAN : m) : sum / static_cast<double>(includePad ? p.kh * p.kw : count));
        }
  return want;
}

// Output (oc, i, j) of the 3x3, padding 1, stride 1 convolution of image `x`
// (1 x c x h x w) by filters `k` (o x c x 3 x 3), summed in double.
double conv3x3Pad1At(const Tensor& x, const Tensor& k, int64_t oc, int64_t i, int64_t j) {
  int64_t channels = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  double sum = 0;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 3; ++b) {
        int64_t ih = i + a - 1, iw = j + b - 1;
        if (ih >= 0 && ih < h && iw >= 0 && iw < w) sum += at(x, {0, c, ih, iw}) * at(k, {oc, c, a, b});
      }
  return sum;
}

}  // namespace

TEST_CASE("dense, matmul and batch_matmul match the reference") {
  std::mt19937 rng(31);
  Tensor x = test::randomTensor(DType::Float32, {5, 7}, rng), w = test::randomTensor(DType::Float32, {3, 7}, rng);
  Tensor y = run("def @main(%x: Tensor[(?, 7), float32], %w: Tensor[(3, 7), float32]) { nn.dense(%x, %w, units=3) }", {x, w})[0];
  std::vector<double> want;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t n = 0; n < 3; ++n) {
      double s = 0;
      for (int64_t k = 0; k < 7; ++k) s += at(x, {i, k}) * at(w, {n, k});
      want.push_back(s);
    }
  checkApprox(y, want);

  Tensor xi = test::randomTensor(DType::Int32, {4, 6}, rng), wi = test::randomTensor(DType::Int32, {2, 6}, rng);
  Tensor yi = run("def @main(%x: Tensor[(4, 6), int32], %w: Tensor[(2, 6), int32]) { nn.dense(%x, %w) }", {xi, wi})[0];
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t n = 0; n < 2; ++n) {
      double s = 0;
      for (int64_t k = 0; k < 6; ++k) s += at(xi, {i, k}) * at(wi, {n, k});
      CHECK(getElement(yi, i * 2 + n) == s);
    }

  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Tensor a = test::randomTensor(DType::Float32, ta ? std::initializer_list<int64_t>{6, 4} : std::initializer_list<int64_t>{4, 6}, rng);
      Tensor b = test::randomTensor(DType::Float32, tb ? std::initializer_list<int64_t>{5, 6} : std::initializer_list<int64_t>{6, 5}, rng);
      std::string at_ = ta ? "Tensor[(6, 4), float32]" : "Tensor[(4, 6), float32]";
      std::string bt_ = tb ? "Tensor[(5, 6), float32]" : "Tensor[(6, 5), float32]";
      Tensor m = run("def @main(%a: " + at_ + ", %b: " + bt_ + ") { nn.matmul(%a, %b, transpose_a=" + (ta ? "True" : "False") +
                         ", transpose_b=" + (tb ? "True" : "False") + ") }", {a, b})[0];
      std::vector<double> mw;
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          double s = 0;
          for (int64_t k = 0; k < 6; ++k) s += (ta ? at(a, {k, i}) : at(a, {i, k})) * (tb ? at(b, {j, k}) : at(b, {k, j}));
          mw.push_back(s);
        }
      checkApprox(m, mw);
    }

  Tensor ba = test::randomTensor(DType::Float32, {1, 3, 4}, rng), bb = test::randomTensor(DType::Float32, {2, 5, 4}, rng);
  Tensor bm = run("def @main(%a: Tensor[(?, 3, 4), float32], %b: Tensor[(2, 5, 4), float32]) { nn.batch_matmul(%a, %b) }", {ba, bb})[0];
  CHECK(bm.shape() == Shape{2, 3, 5});
  std::vector<double> bw;
  for (int64_t q = 0; q < 2; ++q)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double s = 0;
        for (int64_t k = 0; k < 4; ++k) s += at(ba, {0, i, k}) * at(bb, {q, j, k});
        bw.push_back(s);
      }
  checkApprox(bm, bw);
}

TEST_CASE("conv2d with padding, strides, dilation and groups matches the reference") {
  std::mt19937 rng(37);
  struct Case {
    int64_t n, c, h, w, o, kh, kw, groups;
    std::array<int64_t, 2> stride, dilation;
    std::array<int64_t, 4> pad;  // top, left, bottom, right
    bool parallelUnfold = false;  // big enough that the convolution goes to the pool
  };
  std::vector<Case> cases = {
      {1, 3, 8, 8, 4, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {2, 4, 9, 7, 6, 3, 2, 2, {2, 1}, {1, 2}, {0, 1, 2, 0}},
      {1, 4, 6, 6, 4, 3, 3, 4, {1, 1}, {2, 2}, {2, 2, 2, 2}},  // depthwise
      {2, 64, 40, 40, 4, 3, 3, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      // The direct convolution's panels of 32 output pixels: rows of 70 (runs
      // inside a row, and panels straddling two rows), stride 2 on rows of 23
      // and 33, dilation with stride, more filters than one 8-row tile.
      {1, 3, 20, 70, 9, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {1, 5, 17, 45, 7, 3, 3, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {1, 2, 9, 66, 19, 2, 2, 1, {2, 2}, {2, 1}, {0, 2, 1, 0}},
      {1, 6, 11, 35, 12, 3, 1, 3, {1, 3}, {2, 1}, {0, 0, 0, 0}},
      {1, 3, 7, 80, 5, 3, 3, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}},  // stride-2 runs wholly inside the row
      // Panels on one output row (widths 64 and 32) whose windows cross the
      // padding at both ends: the column masks made once per slice, stride 1
      // and 2, and dilated.
      {1, 3, 12, 64, 32, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {1, 8, 9, 64, 16, 3, 3, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {1, 2, 10, 36, 4, 3, 3, 1, {1, 1}, {2, 2}, {2, 2, 2, 2}},
      // A window deeper than one contraction slice is on every machine (40 * 9 =
      // 360: three slices of 120, each tile added to the last); the 32-channel
      // windows above are one whole slice where the panel fits L1.
      {1, 40, 10, 19, 7, 3, 3, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {1, 40, 9, 34, 13, 3, 3, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}},
  };
  // And random small ones: every mix of edges, runs and gathers the direct
  // convolution distinguishes (the sanitizer build runs these too).
  std::uniform_int_distribution<int64_t> small(1, 4), tiny(0, 2), size(1, 40);
  for (int r = 0; r < 40; ++r) {
    Case k{};
    k.groups = small(rng) <= 2 ? 1 : small(rng);
    k.n = small(rng) <= 3 ? 1 : 2;
    k.c = k.groups * small(rng);
    k.o = k.groups * small(rng) * (small(rng) <= 2 ? 1 : 3);
    k.kh = small(rng);
    k.kw = small(rng);
    k.stride = {small(rng) <= 2 ? 1 : 2, small(rng) <= 2 ? 1 : small(rng)};
    k.dilation = {small(rng) <= 3 ? 1 : 2, small(rng) <= 3 ? 1 : 2};
    k.pad = {tiny(rng), tiny(rng), tiny(rng), tiny(rng)};
    k.h = (k.kh - 1) * k.dilation[0] + size(rng) / 4 + 1;
    k.w = (k.kw - 1) * k.dilation[1] + size(rng);
    cases.push_back(k);
  }
  int threadsBefore = device::numThreads();
  device::setNumThreads(2);
  for (const Case& k : cases) {
    Tensor x = test::randomTensor(DType::Float32, {k.n, k.c, k.h, k.w}, rng);
    Tensor w = test::randomTensor(DType::Float32, {k.o, k.c / k.groups, k.kh, k.kw}, rng);
    auto dims = [](std::initializer_list<int64_t> d) {
      std::string s;
      for (int64_t v : d) s += (s.empty() ? "" : ", ") + std::to_string(v);
      return s;
    };
    std::string params = "%x: Tensor[(?, " + dims({k.c, k.h, k.w}) + "), float32], %w: Tensor[(" +
                         dims({k.o, k.c / k.groups, k.kh, k.kw}) + "), float32]";
    std::string conv = "nn.conv2d(%x, %w, strides=[" + dims({k.stride[0], k.stride[1]}) + "], padding=[" +
                       dims({k.pad[0], k.pad[1], k.pad[2], k.pad[3]}) + "], dilation=[" + dims({k.dilation[0], k.dilation[1]}) +
                       "], groups=" + std::to_string(k.groups) + ")";
    std::string src = "def @main(" + params + ") { " + conv + " }";
    int64_t jobs = device::parallelJobsRun();
    Tensor y = run(src, {x, w})[0];
    // Large enough to share out: the CPU's direct convolution goes to the pool.
    if (k.parallelUnfold) CHECK(device::parallelJobsRun() >= jobs + 1);
    int64_t oh = (k.h + k.pad[0] + k.pad[2] - k.dilation[0] * (k.kh - 1) - 1) / k.stride[0] + 1;
    int64_t ow = (k.w + k.pad[1] + k.pad[3] - k.dilation[1] * (k.kw - 1) - 1) / k.stride[1] + 1;
    CHECK(y.shape() == Shape{k.n, k.o, oh, ow});
    std::vector<double> want;
    int64_t cpg = k.c / k.groups, opg = k.o / k.groups;
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t o = 0; o < k.o; ++o)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double s = 0;
            for (int64_t ci = 0; ci < cpg; ++ci)
              for (int64_t a = 0; a < k.kh; ++a)
                for (int64_t b = 0; b < k.kw; ++b) {
                  int64_t ih = i * k.stride[0] + a * k.dilation[0] - k.pad[0];
                  int64_t iw = j * k.stride[1] + b * k.dilation[1] - k.pad[1];
                  if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                  s += at(x, {n, (o / opg) * cpg + ci, ih, iw}) * at(w, {o, ci, a, b});
                }
            want.push_back(s);
          }
    checkApprox(y, want, 1e-4);
    // The same convolution finishing its own epilogue (post-ops), in turn: bias
    // and ReLU, bias alone, ReLU alone; a NaN input stays NaN through ReLU.
    int form = static_cast<int>(&k - cases.data()) % 3;
    Tensor bias = test::randomTensor(DType::Float32, {k.o}, rng);
    std::string epilogue = form == 0 ? "nn.relu(nn.bias_add(" + conv + ", %b))"
                           : form == 1 ? "nn.bias_add(" + conv + ", %b)"
                                       : "nn.relu(" + conv + ")";
    std::string post = "def @main(" + params + ", %b: Tensor[(" + std::to_string(k.o) + "), float32]) { " + epilogue + " }";
    CAPTURE(post);
    std::string loops = kernel_ir::lowerToLoops(test::fusedFrom(post), {.directConv = true}).toString();
    CHECK(loops.find(form == 1 ? "[o]\n" : ", relu\n") != std::string::npos);
    CHECK(loops.find("for ") == std::string::npos);  // no second pass over the output
    bool withNaN = &k == &cases.front();
    if (withNaN) x.data<float>()[0] = std::nanf("");
    Tensor z = run(post, {x, w, bias})[0];
    for (size_t i = 0; i < want.size(); ++i) {
      int64_t o = static_cast<int64_t>(i) / (oh * ow) % k.o;
      double v = want[i] + (form == 2 ? 0.0 : getElement(bias, o));
      if (form != 1) v = std::max(v, 0.0);
      double got = getElement(z, static_cast<int64_t>(i));
      if (withNaN && std::isnan(got)) continue;  // the outputs whose window holds the NaN
      CAPTURE(i);
      CHECK(got == doctest::Approx(v).epsilon(1e-4).scale(1.0));
    }
    if (withNaN) CHECK(std::isnan(getElement(z, 0)));
  }
  device::setNumThreads(threadsBefore);
}

// Pooling without padding: the loops' bounds prove the window's guards
// (kernel_ir/range_fold.h), which fold away, and the small window is emitted
// without loops (codegen/loop_emitter.h, unrollsWhole), so the loop over output
// columns is innermost and vectorizes. Values against the reference, static
// and `?` shapes, a NaN kept by max; with padding the guards stay.
TEST_CASE("pooling windows without padding fold their guards, unroll and vectorize, and match the reference") {
  std::mt19937 rng(43);
  Tensor x = test::randomTensor(DType::Float32, {2, 3, 9, 20}, rng);
  x.data<float>()[5] = NAN;  // image 0, channel 0, row 0, column 5
  struct Window {
    int64_t kh, kw, stride;
  };
  for (Window w : {Window{2, 2, 2}, Window{3, 3, 1}, Window{2, 3, 1}})
    for (bool max : {true, false})
      for (const char* type : {"Tensor[(2, 3, 9, 20), float32]", "Tensor[(?, 3, 9, ?), float32]"}) {
        std::string op = max ? "nn.max_pool2d" : "nn.avg_pool2d";
        std::string src = "def @main(%x: " + std::string(type) + ") { " + op + "(%x, pool_size=[" +
                          std::to_string(w.kh) + ", " + std::to_string(w.kw) + "], strides=[" + std::to_string(w.stride) +
                          ", " + std::to_string(w.stride) + "]) }";
        CAPTURE(src);
        std::string loops = kernel_ir::lowerToLoops(test::fusedFrom(src)).toString();
        if (type[8] == '2') {  // static: every guard decided
          CHECK(loops.find("select(") == std::string::npos);
          CHECK(loops.find("lt(") == std::string::npos);
        }
        Tensor y = run(src, {x})[0];
        int64_t oh = (9 - w.kh) / w.stride + 1, ow = (20 - w.kw) / w.stride + 1;
        REQUIRE(y.shape() == Shape{2, 3, oh, ow});
        std::vector<double> want = poolReference(x, {w.kh, w.kw, w.stride, w.stride}, oh, ow, max, true);
        for (size_t i = 0; i < want.size(); ++i) {
          double got = getElement(y, static_cast<int64_t>(i));
          CAPTURE(i);
          if (std::isnan(want[i])) CHECK(std::isnan(got));
          else CHECK(got == doctest::Approx(want[i]).epsilon(1e-5));
        }
      }
  // The 2x2 max pool's kernel computes whole vectors of outputs.
  auto k = jit::KernelCache::global().get(
      test::fusedFrom("def @main(%x: Tensor[(1, 16, 32, 32), float32]) { nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]) }"),
      {}, true);
  CHECK(k->optimizedIR().find(" x float>") != std::string::npos);
  // With padding the guards are needed, and stay.
  std::string padded = kernel_ir::lowerToLoops(test::fusedFrom(
      "def @main(%x: Tensor[(1, 2, 7, 6), float32]) { nn.max_pool2d(%x, pool_size=[2, 2], padding=[1, 1]) }")).toString();
  CHECK(padded.find("select(") != std::string::npos);
}

// Padded windows: the CPU lowering splits each spatial loop into border loops
// and an interior whose guards fold away (kernel_ir/border_split.h). Every
// output, border or interior, must match the reference: odd sizes, asymmetric
// padding, strides 1 and 2, dilation, a `?` batch, and a padded float64
// convolution (the generic lowering).
TEST_CASE("padded windows split at their borders: guard-free interiors, every output matches the reference") {
  std::mt19937 rng(45);
  struct Pool {
    const char* op;
    int64_t kh, kw, sh, sw, dh, dw, top, left, bottom, right;
    bool includePad;
  };
  const Pool pools[] = {
      {"nn.max_pool2d", 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false},  // a ResNet stem's
      {"nn.avg_pool2d", 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},
      {"nn.avg_pool2d", 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false},
      {"nn.max_pool2d", 2, 3, 1, 2, 2, 1, 2, 1, 1, 2, false},
  };
  const int64_t h = 23, w = 26;
  Tensor x = test::randomTensor(DType::Float32, {2, 3, h, w}, rng);
  for (const Pool& p : pools) {
    int64_t oh = (h + p.top + p.bottom - (p.kh - 1) * p.dh - 1) / p.sh + 1;
    int64_t ow = (w + p.left + p.right - (p.kw - 1) * p.dw - 1) / p.sw + 1;
    std::string attrs = "pool_size=[" + std::to_string(p.kh) + ", " + std::to_string(p.kw) + "], strides=[" +
                        std::to_string(p.sh) + ", " + std::to_string(p.sw) + "], dilation=[" + std::to_string(p.dh) + ", " +
                        std::to_string(p.dw) + "], padding=[" + std::to_string(p.top) + ", " + std::to_string(p.left) + ", " +
                        std::to_string(p.bottom) + ", " + std::to_string(p.right) + "]";
    bool max = std::string(p.op) == "nn.max_pool2d";
    if (!max) attrs += std::string(", count_include_pad=") + (p.includePad ? "True" : "False");
    CAPTURE(attrs);
    std::string program = "def @main(%x: Tensor[(?, 3, 23, 26), float32]) { " + std::string(p.op) + "(%x, " + attrs + ") }";
    Tensor y = run(program, {x})[0];
    REQUIRE(y.shape() == Shape{2, 3, oh, ow});
    checkApprox(y, poolReference(x, {p.kh, p.kw, p.sh, p.sw, p.dh, p.dw, p.top, p.left}, oh, ow, max, p.includePad));
    // The interior's store reads the input with no guard left.
    std::string loops = kernel_ir::lowerToLoops(test::fusedFrom(program), {.splitBorders = true}).toString();
    bool guardFree = false;
    for (size_t at = 0, end; at < loops.size(); at = end + 1) {
      end = std::min(loops.find('\n', at), loops.size());
      std::string line = loops.substr(at, end - at);
      guardFree = guardFree || (line.find("out0[") != std::string::npos && line.find("select(") == std::string::npos &&
                                line.find(" ge(") == std::string::npos && line.find("lt(") == std::string::npos);
    }
    CHECK(guardFree);
  }
  // The generic convolution (float64), padded: the same split.
  Tensor cx = test::randomTensor(DType::Float64, {1, 2, 12, 13}, rng), cw = test::randomTensor(DType::Float64, {3, 2, 3, 3}, rng);
  Tensor cy = run("def @main(%x: Tensor[(1, 2, 12, 13), float64], %w: Tensor[(3, 2, 3, 3), float64]) { "
                  "nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=3, kernel_size=[3, 3]) }",
                  {cx, cw})[0];
  REQUIRE(cy.shape() == Shape{1, 3, 12, 13});
  std::vector<double> cwant;
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t i = 0; i < 12; ++i)
      for (int64_t j = 0; j < 13; ++j) cwant.push_back(conv3x3Pad1At(cx, cw, o, i, j));
  checkApprox(cy, cwant, 1e-9);
}

TEST_CASE("max, average and global pooling match the reference") {
  std::mt19937 rng(41);
  Tensor x = test::randomTensor(DType::Float32, {1, 2, 7, 6}, rng);
  for (bool max : {true, false})
    for (bool includePad : {false, true}) {
      std::string op = max ? "nn.max_pool2d" : "nn.avg_pool2d";
      Tensor y = run("def @main(%x: Tensor[(1, 2, 7, 6), float32]) { " + op +
                         "(%x, pool_size=[3, 2], strides=[2, 2], padding=[1, 1], count_include_pad=" +
                         (includePad ? "True" : "False") + ") }", {x})[0];
      CHECK(y.shape() == Shape{1, 2, 4, 4});
      std::vector<double> want;
      for (int64_t ch = 0; ch < 2; ++ch)
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t j = 0; j < 4; ++j) {
            double m = -INFINITY, s = 0;
            int count = 0;
            for (int64_t a = 0; a < 3; ++a)
              for (int64_t b = 0; b < 2; ++b) {
                int64_t ih = i * 2 + a - 1, iw = j * 2 + b - 1;
                if (ih < 0 || ih >= 7 || iw < 0 || iw >= 6) continue;
                m = std::max(m, at(x, {0, ch, ih, iw}));
                s += at(x, {0, ch, ih, iw});
                ++count;
              }
            want.push_back(max ? m : s / (includePad ? 6 : count));
          }
      checkApprox(y, want);
    }
  Tensor g = run("def @main(%x: Tensor[(?, 2, 7, 6), float32]) { nn.global_avg_pool2d(%x) }", {x})[0];
  CHECK(g.shape() == Shape{1, 2, 1, 1});
  for (int64_t ch = 0; ch < 2; ++ch) {
    double s = 0;
    for (int64_t i = 0; i < 42; ++i) s += getElement(x, ch * 42 + i);
    CHECK(getElement(g, ch) == doctest::Approx(s / 42).epsilon(1e-5));
  }
}

TEST_CASE("dense through the GEMM microkernel: tile edges, leading dimensions, the product as an output too") {
  std::mt19937 rng(43);
  struct Size {
    int64_t b, m, n, k;
  };
  for (Size s : {Size{1, 1, 1, 1}, Size{2, 7, 33, 129}, Size{1, 9, 31, 257}, Size{3, 17, 64, 128}}) {
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    Tensor x = test::randomTensor(DType::Float32, {s.b, s.m, s.k}, rng), w = test::randomTensor(DType::Float32, {s.n, s.k}, rng);
    auto outs = run("def @main(%x: Tensor[(?, ?, " + std::to_string(s.k) + "), float32], %w: Tensor[(" + std::to_string(s.n) +
                        ", " + std::to_string(s.k) + "), float32]) { let %y = nn.dense(%x, %w); (%y, nn.relu(%y)) }",
                    {x, w});
    REQUIRE(outs[0].shape() == Shape{s.b, s.m, s.n});
    for (int64_t r = 0; r < s.b * s.m; ++r)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < s.k; ++p) acc += getElement(x, r * s.k + p) * getElement(w, j * s.k + p);
        CHECK(getElement(outs[0], r * s.n + j) == doctest::Approx(acc).epsilon(1e-4).scale(1.0));
        CHECK(getElement(outs[1], r * s.n + j) == doctest::Approx(std::max(acc, 0.0)).epsilon(1e-4).scale(1.0));
      }
  }
}

TEST_CASE("dense, conv2d and pooling in other dtypes (the generic lowering)") {
  std::mt19937 rng(47);
  for (DType dt : {DType::Float16, DType::Float64, DType::Int8, DType::Int64}) {
    CAPTURE(dtypeName(dt));
    std::string t = std::string(dtypeName(dt));
    double lo = isFloat(dt) ? -2 : -3, hi = isFloat(dt) ? 2 : 3;
    Tensor x = test::randomTensor(dt, {3, 5}, rng, lo, hi), w = test::randomTensor(dt, {2, 5}, rng, lo, hi);
    Tensor y = run("def @main(%x: Tensor[(3, 5), " + t + "], %w: Tensor[(2, 5), " + t + "]) { nn.dense(%x, %w) }", {x, w})[0];
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t n = 0; n < 2; ++n) {
        double s = 0;
        for (int64_t k = 0; k < 5; ++k) s += at(x, {i, k}) * at(w, {n, k});
        if (dt == DType::Int8) s = static_cast<int8_t>(static_cast<int64_t>(s));
        CHECK(getElement(y, i * 2 + n) == doctest::Approx(s).epsilon(dt == DType::Float16 ? 1e-2 : 1e-9).scale(1.0));
      }
    Tensor img = test::randomTensor(dt, {1, 2, 5, 5}, rng, lo, hi), k = test::randomTensor(dt, {3, 2, 3, 3}, rng, lo, hi);
    Tensor c = run("def @main(%x: Tensor[(1, 2, 5, 5), " + t + "], %w: Tensor[(3, 2, 3, 3), " + t +
                       "]) { nn.conv2d(%x, %w, padding=[1, 1]) }", {img, k})[0];
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          double s = conv3x3Pad1At(img, k, o, i, j);
          if (dt == DType::Int8) s = static_cast<int8_t>(static_cast<int64_t>(s));
          CHECK(getElement(c, (o * 5 + i) * 5 + j) == doctest::Approx(s).epsilon(dt == DType::Float16 ? 2e-2 : 1e-9).scale(1.0));
        }
    Tensor mp = run("def @main(%x: Tensor[(1, 2, 5, 5), " + t + "]) { nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]) }", {img})[0];
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          double m = -1e300;
          for (int64_t a = 0; a < 2; ++a)
            for (int64_t b = 0; b < 2; ++b) m = std::max(m, at(img, {0, ch, 2 * i + a, 2 * j + b}));
          CHECK(getElement(mp, (ch * 2 + i) * 2 + j) == m);
        }
  }
}

using test::checkGemm;

TEST_CASE("sgemm: the short-wide and the tall driver, transposes, edges, K slices and accumulate") {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> d(-1, 1);
  int threadsBefore = device::numThreads();
  // m <= 128 takes the short-wide driver (A packed once, columns shared out),
  // larger m the tall one (B packed once, rows shared out); k = 300 spans three
  // KC slices; n = 577 / 77 and m = 13 / 14 / 16 / 203 leave partial tiles at
  // both edges (a last row tile of 1, 2, 4 and 5 rows: the 2- and 4-row tiles on AVX2).
  for (int threads : {1, 2})
    for (int64_t m : {13, 14, 16, 203})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool acc : {false, true}) {
            device::setNumThreads(threads);
            const int64_t n = m <= 128 ? 577 : 77, k = 300;  // each big enough for the pool
            CAPTURE(threads);
            CAPTURE(m);
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(acc);
            std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
            for (float& v : a) v = d(rng);
            for (float& v : b) v = d(rng);
            for (float& v : c) v = d(rng);
            std::vector<float> c0 = c;
            jit::sgemm(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, c.data(), n, acc);
            checkGemm(c, c0, a, b, m, n, k, ta, tb, acc);
            // The schedule's other micro-kernel tile (AVX-512: 6 x 64) and A packed
            // where it could be read in place: the same product.
            for (jit::GemmBlocking blocking : {jit::GemmBlocking{0, 0, 1, false}, jit::GemmBlocking{0, 0, 1, true},
                                               jit::GemmBlocking{0, 0, 0, true}}) {
              CAPTURE(blocking.tile);
              CAPTURE(blocking.packA);
              c = c0;
              jit::sgemm(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, c.data(), n, acc, {}, blocking);
              checkGemm(c, c0, a, b, m, n, k, ta, tb, acc);
            }
          }
  device::setNumThreads(threadsBefore);
}


TEST_CASE("sgemm: few rows (skinny path) and prepacked B on odd shapes, against the reference") {
  std::mt19937 rng(43);
  std::uniform_real_distribution<float> d(-1, 1);
  int threadsBefore = device::numThreads();
  // m 1..8 takes the skinny path (B prepacked, or read in place when not
  // transposed); 17 and 203 the tile drivers with a prepacked B, or, for n <= 16
  // (1, 10, 16), the skinny kernel over 8-row chunks with half panels. n = 1,
  // 10, 17, 33, 517 leave partial panels; k = 1, 7, 129, 300 are not multiples
  // of the vector width and span one to three KC slices.
  for (int threads : {1, 2})
    for (int64_t m : {1, 3, 8, 17, 203})
      for (int64_t n : {1, 10, 16, 17, 33, 517})
        for (int64_t k : {1, 7, 129, 300})
          for (bool ta : {false, true})
            for (bool tb : {false, true}) {
              if (m * n * k > 2'000'000) continue;  // the tall driver's large cases: the test above
              device::setNumThreads(threads);
              bool acc = (m + n + k) % 2 == 1;
              CAPTURE(threads);
              CAPTURE(m);
              CAPTURE(n);
              CAPTURE(k);
              CAPTURE(ta);
              CAPTURE(tb);
              std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
              for (float& v : a) v = d(rng);
              for (float& v : b) v = d(rng);
              for (float& v : c) v = d(rng);
              std::vector<float> c0 = c;
              jit::sgemm(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, c.data(), n, acc);
              checkGemm(c, c0, a, b, m, n, k, ta, tb, acc);
              int64_t floats = jit::packedBFloats(k, n);
              REQUIRE(floats >= jit::kPackedHeaderFloats + k * n);
              std::vector<float> packed(static_cast<size_t>(floats));
              jit::packGemmB(b.data(), tb ? k : n, tb, k, n, packed.data());
              CHECK(jit::packedBMatches(packed.data(), k, n));
              CHECK_FALSE(jit::packedBMatches(packed.data(), k + 1, n));
              c = c0;
              jit::sgemmPacked(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, packed.data(), c.data(), n, acc);
              checkGemm(c, c0, a, b, m, n, k, ta, tb, acc);
              // B packed for the wide tile (6 x 64 on AVX-512): the tile drivers read
              // it, the skinny ones (which read the default's panels) take B in place;
              // and a B packed for one tile given to the other is not read as its own.
              if (threads == 1) {
                std::vector<float> wide(static_cast<size_t>(jit::packedBFloats(k, n, 1)));
                jit::packGemmB(b.data(), tb ? k : n, tb, k, n, wide.data(), 1);
                CHECK(jit::packedBMatches(wide.data(), k, n, 1));
                for (bool packA : {false, true}) {
                  CAPTURE(packA);
                  c = c0;
                  jit::sgemmPacked(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, wide.data(), c.data(), n, acc, {},
                                   jit::GemmBlocking{0, 0, 1, packA});
                  checkGemm(c, c0, a, b, m, n, k, ta, tb, acc);
                  c = c0;
                  jit::sgemmPacked(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, packed.data(), c.data(), n, acc, {},
                                   jit::GemmBlocking{0, 0, 1, packA});
                  checkGemm(c, c0, a, b, m, n, k, ta, tb, acc);
                }
              }
            }
  device::setNumThreads(threadsBefore);
}

TEST_CASE("sgemm: a weight used again is streamed the other way round, with the same result") {
  // The skinny path reads the panels of a B it read in the last call in the
  // opposite order (their tail is still in cache). Every call of a run of the
  // same product must give the same, correct result whichever way it went:
  // a panel skipped or taken twice going backwards shows as a difference.
  std::mt19937 rng(44);
  std::uniform_real_distribution<float> d(-1, 1);
  int threadsBefore = device::numThreads();
  for (int threads : {1, 2})
    for (int64_t m : {1, 3})
      for (int64_t n : {17, 100, 517})
        for (bool prepacked : {false, true}) {
          device::setNumThreads(threads);
          CAPTURE(threads);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(prepacked);
          int64_t k = 37;
          std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
          for (float& v : a) v = d(rng);
          for (float& v : b) v = d(rng);
          std::vector<float> packed(static_cast<size_t>(jit::packedBFloats(k, n)));
          jit::packGemmB(b.data(), n, false, k, n, packed.data());
          std::vector<float> zero(static_cast<size_t>(m * n), 0.0f), first;
          for (int call = 0; call < 3; ++call) {
            std::vector<float> c(static_cast<size_t>(m * n), 7.0f);
            jit::sgemmPacked(m, n, k, a.data(), k, false, b.data(), n, false, prepacked ? packed.data() : nullptr, c.data(), n,
                             false);
            if (call == 0) {
              checkGemm(c, zero, a, b, m, n, k, false, false, false);
              first = c;
            } else {
              CHECK(c == first);
            }
          }
        }
  device::setNumThreads(threadsBefore);
}

TEST_CASE("sgemm: post-ops (bias per column, ReLU) on every path, packed and not, against the reference") {
  std::mt19937 rng(47);
  std::uniform_real_distribution<float> d(-1, 1);
  int threadsBefore = device::numThreads();
  // Rows 1, 5 (skinny), 37, 38 and 40 (short-wide, or narrow for n <= 16; a last
  // row tile of 1, 2 and 4 rows: AVX2's 2-row tile sums even and odd steps apart,
  // and k = 19 leaves it an odd step), 203 (tall);
  // columns 3, 16 (narrow), 45, 517 (partial panels); k = 0 (the empty
  // contraction still adds the bias), 19, 300 (three KC slices).
  int cases = 0;
  for (int threads : {1, 2})
    for (int64_t m : {1, 5, 37, 38, 40, 203})
      for (int64_t n : {3, 16, 45, 517})
        for (int64_t k : {0, 19, 300})
          for (bool tb : {false, true}) {
            if (m * n * k > 3'000'000) continue;
            device::setNumThreads(threads);
            ++cases;
            bool acc = (m + n + k + cases) % 3 == 0, relu = cases % 2 == 0, withBias = cases % 4 != 1;
            CAPTURE(threads);
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(tb);
            CAPTURE(acc);
            CAPTURE(relu);
            CAPTURE(withBias);
            std::vector<float> a(static_cast<size_t>(std::max<int64_t>(1, m * k))), b(static_cast<size_t>(std::max<int64_t>(1, k * n))),
                c(static_cast<size_t>(m * n)), bias(static_cast<size_t>(n));
            for (float& v : a) v = d(rng);
            for (float& v : b) v = d(rng);
            for (float& v : c) v = d(rng);
            for (float& v : bias) v = d(rng);
            const std::vector<float> c0 = c;
            jit::GemmPost post{withBias ? bias.data() : nullptr, relu};
            auto check = [&](const char* path) {
              CAPTURE(path);
              checkGemm(c, c0, a, b, m, n, k, false, tb, acc, post.bias, relu);
            };
            jit::sgemm(m, n, k, a.data(), k, false, b.data(), tb ? k : n, tb, c.data(), n, acc, post);
            check("sgemm");
            if (k == 0) continue;
            std::vector<float> packed(static_cast<size_t>(jit::packedBFloats(k, n)));
            jit::packGemmB(b.data(), tb ? k : n, tb, k, n, packed.data());
            c = c0;
            jit::sgemmPacked(m, n, k, a.data(), k, false, b.data(), tb ? k : n, tb, packed.data(), c.data(), n, acc, post);
            check("packed");
          }
  CHECK(cases > 100);
  device::setNumThreads(threadsBefore);
}

TEST_CASE("a dense layer's bias and ReLU are finished by the product itself, NaN kept") {
  std::mt19937 rng(53);
  for (int form = 0; form < 3; ++form)
    for (int64_t rows : {1, 6, 40}) {
      std::string dense = "nn.dense(%x, %w, units=24)";
      std::string epilogue = form == 0 ? "nn.relu(nn.bias_add(" + dense + ", %b))"
                             : form == 1 ? "nn.bias_add(" + dense + ", %b, axis=-1)"
                                         : "nn.relu(" + dense + ")";
      std::string program = "def @main(%x: Tensor[(" + std::to_string(rows) +
                            ", 33), float32], %w: Tensor[(24, 33), float32], %b: Tensor[(24), float32]) { " + epilogue + " }";
      CAPTURE(program);
      std::string loops = kernel_ir::lowerToLoops(test::fusedFrom(program), {.directConv = true, .gemmPostOps = true}).toString();
      CHECK(loops.find(form == 1 ? "[j]\n" : ", relu\n") != std::string::npos);
      CHECK(loops.find("for ") == std::string::npos);  // no second pass over the output
      Tensor x = test::randomTensor(DType::Float32, {rows, 33}, rng), w = test::randomTensor(DType::Float32, {24, 33}, rng);
      Tensor bias = test::randomTensor(DType::Float32, {24}, rng);
      x.data<float>()[0] = std::nanf("");  // row 0 is NaN through ReLU too
      Tensor y = run(program, {x, w, bias})[0];
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < 24; ++j) {
          double v = 0;
          for (int64_t p = 0; p < 33; ++p) v += double(x.data<float>()[i * 33 + p]) * w.data<float>()[j * 33 + p];
          if (form != 2) v += bias.data<float>()[j];
          if (form != 1 && !std::isnan(v)) v = std::max(v, 0.0);
          double got = getElement(y, i * 24 + j);
          CAPTURE(i);
          CAPTURE(j);
          if (i == 0) CHECK(std::isnan(got));
          else CHECK(got == doctest::Approx(v).epsilon(1e-4).scale(1.0));
        }
    }
}

TEST_CASE("sgemm: a packed B made for another shape is ignored, not misread") {
  std::vector<float> a(3 * 4, 1.0f), b(4 * 5, 2.0f), c(3 * 5, 0.0f);
  std::vector<float> packed(static_cast<size_t>(jit::packedBFloats(5, 4)));
  std::vector<float> other(5 * 4, 100.0f);
  jit::packGemmB(other.data(), 4, false, 5, 4, packed.data());  // a 5 x 4 B
  jit::sgemmPacked(3, 5, 4, a.data(), 4, false, b.data(), 5, false, packed.data(), c.data(), 5, false);
  for (float v : c) CHECK(v == 8.0f);  // read from b itself
  CHECK(jit::packedBFloats(-1, 4) == -1);
  CHECK(jit::packedBFloats(INT64_MAX / 2, INT64_MAX / 4) == -1);
}

TEST_CASE("direct convolution: prepacked filters give the per-call result - filters packed for another shape are ignored") {
  std::mt19937 rng(47);
  std::uniform_real_distribution<float> dist(-1, 1);
  // 2 images, 6 channels in 3 groups, 9 filters, 3x2 windows, stride (1, 2), pad (1, 0), 13x41.
  jit::Conv2dDims d{2, 6, 13, 41, 9, 3, 2, 0, 0, 1, 2, 1, 0, 1, 1, 3};
  d.oh = (13 + 2 * 1 - 3) / 1 + 1;
  d.ow = (41 - 2) / 2 + 1;
  int64_t k = 2 * 3 * 2;
  std::vector<float> x(static_cast<size_t>(2 * 6 * 13 * 41)), w(static_cast<size_t>(9 * k));
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  size_t outSize = static_cast<size_t>(2 * 9 * d.oh * d.ow);
  std::vector<float> plain(outSize), packedOut(outSize), mismatched(outSize);
  jit::sconv2d(d, x.data(), w.data(), nullptr, plain.data());
  int64_t floats = jit::packedConvFilterFloats(9, k, 3);
  REQUIRE(floats > 9 * k);
  std::vector<float> packed(static_cast<size_t>(floats));
  jit::packConvFilter(w.data(), 9, k, 3, packed.data());
  CHECK(jit::packedConvFilterMatches(packed.data(), 9, k, 3));
  CHECK_FALSE(jit::packedConvFilterMatches(packed.data(), 9, k, 1));
  jit::sconv2d(d, x.data(), w.data(), packed.data(), packedOut.data());
  CHECK(packedOut == plain);
  std::vector<float> other(static_cast<size_t>(jit::packedConvFilterFloats(9, k, 1)));
  jit::packConvFilter(w.data(), 9, k, 1, other.data());  // the same weights as one group: another layout
  jit::sconv2d(d, x.data(), w.data(), other.data(), mismatched.data());
  CHECK(mismatched == plain);
  CHECK(jit::packedConvFilterFloats(9, k, 2) == -1);  // 9 filters do not split into 2 groups
  CHECK(jit::packedConvFilterFloats(INT64_MAX / 2, INT64_MAX / 2, 1) == -1);
  // And against the definition, at a few points.
  for (size_t probe : {size_t(0), outSize / 3, outSize - 1}) {
    int64_t ox = static_cast<int64_t>(probe) % d.ow, oy = static_cast<int64_t>(probe) / d.ow % d.oh;
    int64_t o = static_cast<int64_t>(probe) / (d.ow * d.oh) % 9, n = static_cast<int64_t>(probe) / (d.ow * d.oh * 9);
    double s = 0;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t ky = 0; ky < 3; ++ky)
        for (int64_t kx = 0; kx < 2; ++kx) {
          int64_t iy = oy - 1 + ky, ix = ox * 2 + kx;
          if (iy < 0 || iy >= 13 || ix >= 41) continue;
          s += double(w[static_cast<size_t>(((o * 2 + c) * 3 + ky) * 2 + kx)]) *
               x[static_cast<size_t>(((n * 6 + o / 3 * 2 + c) * 13 + iy) * 41 + ix)];
        }
    CHECK(plain[probe] == doctest::Approx(s).epsilon(1e-4));
  }
}

// The row path (jit/conv2d_rows.cc) on shapes that take it: the model bench's
// two convolutions, stride 2 with dilation, groups, filters that do not fill a
// 4-row tile, a last tile of fewer than four strips, strips narrower than 16, two
// images, and windows deeper than one contraction slice; bias and ReLU on every
// other one, a NaN kept. Outputs 7 wide and stride 3 take the panel path.
TEST_CASE("direct convolution: the row path reads a padded copy and matches the definition") {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl"))
    return test::skip("the row path needs AVX-512 (F and VL); this CPU lacks it");
  jit::Conv2dDims ineligible[] = {{1, 8, 7, 7, 8, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1, 1},
                                  {1, 8, 30, 30, 8, 3, 3, 10, 10, 3, 3, 0, 0, 1, 1, 1}};
  for (const jit::Conv2dDims& d : ineligible) CHECK_FALSE(jit::detail::rowConvApplies(d));
  struct Case {
    int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  };
  const Case cases[] = {
      {1, 3, 64, 64, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // model_bench's first convolution
      {1, 32, 64, 64, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1},  // and its second: 288 deep, slices
      {2, 6, 11, 29, 10, 3, 3, 1, 2, 2, 1, 2, 2, 2},   // dilated, stride (1, 2), 2 groups of 5 filters
      {1, 5, 9, 13, 7, 2, 3, 2, 1, 0, 2, 1, 1, 1},     // 15 wide, 7 filters: a 3-row tile
      {1, 40, 5, 40, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1},    // 360 deep; 5 rows of 3 strips: the last tile partial
  };
  std::mt19937 rng(53);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const Case& k : cases) {
    CAPTURE(k.c);
    CAPTURE(k.w);
    jit::Conv2dDims d{k.n, k.c, k.h, k.w, k.o, k.kh, k.kw, 0, 0, k.sh, k.sw, k.ph, k.pw, k.dh, k.dw, k.groups};
    d.oh = (k.h + 2 * k.ph - k.dh * (k.kh - 1) - 1) / k.sh + 1;
    d.ow = (k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1) / k.sw + 1;
    REQUIRE(jit::detail::rowConvApplies(d));
    int64_t cg = k.c / k.groups, og = k.o / k.groups;
    std::vector<float> x(static_cast<size_t>(k.n * k.c * k.h * k.w)), w(static_cast<size_t>(k.o * cg * k.kh * k.kw)),
        bias(static_cast<size_t>(k.o));
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    bool post = &k - cases < 3;
    if (post) x[5] = std::nanf("");
    std::vector<float> out(static_cast<size_t>(k.n * k.o * d.oh * d.ow), -7.0f);
    jit::sconv2d(d, x.data(), w.data(), nullptr, out.data(), post ? jit::ConvPostOps{bias.data(), true} : jit::ConvPostOps{});
    int64_t wrong = 0, nans = 0, nanWindows = 0;
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t o = 0; o < k.o; ++o)
        for (int64_t oy = 0; oy < d.oh; ++oy)
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            double s = post ? bias[static_cast<size_t>(o)] : 0.0;
            bool nan = false;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t ky = 0; ky < k.kh; ++ky)
                for (int64_t kx = 0; kx < k.kw; ++kx) {
                  int64_t iy = oy * k.sh + ky * k.dh - k.ph, ix = ox * k.sw + kx * k.dw - k.pw;
                  if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                  size_t at = static_cast<size_t>(((n * k.c + o / og * cg + c) * k.h + iy) * k.w + ix);
                  nan |= std::isnan(x[at]);
                  s += double(w[static_cast<size_t>(((o * cg + c) * k.kh + ky) * k.kw + kx)]) * x[at];
                }
            if (post) s = std::max(s, 0.0);
            float got = out[static_cast<size_t>(((n * k.o + o) * d.oh + oy) * d.ow + ox)];
            nanWindows += nan;
            if (nan) nans += std::isnan(got);
            else wrong += !(std::fabs(got - s) <= 1e-4 * std::max(1.0, std::fabs(s)));
          }
    CHECK(wrong == 0);
    CHECK(nans == nanWindows);
    if (post) CHECK(nans > 0);
  }
}

TEST_CASE("direct convolution: window coordinates past int32 take the 64-bit path, not a wrapped one") {
  // Stride 2^32 over rows: output row 1 starts at input row 2^32, far outside
  // the 3-row image (all zeros), which 32-bit coordinates would wrap to row 0.
  jit::Conv2dDims d{1, 1, 3, 5, 1, 1, 3, 2, 3, int64_t(1) << 32, 1, 0, 0, 1, 1, 1};
  std::vector<float> x(15), w{1.0f, 2.0f, 3.0f}, out(6, -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  jit::sconv2d(d, x.data(), w.data(), nullptr, out.data());
  for (int64_t ox = 0; ox < 3; ++ox) CHECK(out[static_cast<size_t>(ox)] == x[ox] + 2 * x[ox + 1] + 3 * x[ox + 2]);
  for (int64_t ox = 0; ox < 3; ++ox) CHECK(out[static_cast<size_t>(3 + ox)] == 0.0f);
}
