// The emulated CUDA device: every operator's GPU kernel, run on the host through
// the same plan, streams, pools and copies as on a GPU, computes what the
// operator's CPU kernel computes; edge guards hold at odd sizes; the GEMM for
// every transposition and batch; rows-mode reductions below and above a block;
// the emulator's own semantics (barriers, shuffles, votes, shared memory) and
// its reports (out-of-bounds and freed memory, divergent barriers).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "test_skip.h"
#include "codegen/gpu_emulation.h"
#include "compiler/passes/fuse_ops.h"
#include "compiler/passes/to_fused_function.h"
#include "compiler/pipeline.h"
#include "device/cuda_driver.h"
#include "device/cuda_emu_driver.h"
#include "device/cuda_stream.h"
#include "jit/cuda_kernel.h"
#include "jit/object_loader.h"
#include "kiln/compile.h"
#include "kiln/vm.h"
#include "kernel_ir/kernel_kind.h"
#include "kernel_ir/lower.h"
#include "kernel_util.h"
#include "operator_programs.h"

namespace {

using kiln::DType;
using kiln::Device;
using kiln::Tensor;

const Device kEmu{Device::Kind::CudaEmu, 0};

// The GPU the comparisons run on: the emulated one, or the one
// $KILN_GPU_TEST_DEVICE names (`cuda` on a machine with a GPU runs the same
// comparisons against the real driver; the emulator's own semantics and
// reports are tested on the emulator only).
Device gpuUnderTest() {
  static const Device d = [] {
    const char* v = std::getenv("KILN_GPU_TEST_DEVICE");
    return v && *v ? Device::parse(v) : kEmu;
  }();
  return d;
}

Tensor copyTo(const Tensor& t, Device d) {
  Tensor out = Tensor::empty(t.dtype(), t.shape(), d);
  if (t.nbytes()) kiln::device::copyBytes(out.data(), d, t.data(), t.device(), t.nbytes());
  return out;
}

// A random value suited to an input of this dtype: floats in [-2, 2]; integers
// in [0, 3], valid as indices into any axis the programs have (take, gather) and
// small enough for every arithmetic operator.
Tensor randomInput(DType dt, const kiln::Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(dt, shape);
  std::uniform_real_distribution<double> real(-2, 2);
  std::uniform_int_distribution<int> small(0, 3);
  for (int64_t i = 0; i < t.numel(); ++i)
    kiln::test::setElement(t, i, kiln::isFloat(dt) ? real(rng) : kiln::isBool(dt) ? double(rng() & 1) : double(small(rng)));
  return t;
}

// Equal within what a different summation order and different (host libm
// versus the vector approximations) math may change.
bool near(double got, double want, DType dt, double scale) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  double tol = dt == DType::Float16 ? 4e-3 : dt == DType::Float32 ? 2e-5 : dt == DType::Float64 ? 1e-12 : 0;
  return std::fabs(got - want) <= tol * std::max({1.0, std::fabs(want), scale});
}

// Runs `f` on the CPU and on the emulated GPU with the same inputs and compares
// every output element. Returns how many elements were compared.
int64_t compareOnDevices(const kiln::kernel_ir::FusedFunction& f, const std::vector<Tensor>& inputs, double scale = 0) {
  auto cpu = kiln::jit::KernelCache::global().get(f);
  auto gpu = kiln::jit::KernelCache::global().get(f, gpuUnderTest());
  std::vector<Tensor> want = (*cpu)(inputs);
  std::vector<Tensor> onGpu;
  for (const Tensor& t : inputs) onGpu.push_back(copyTo(t, gpuUnderTest()));
  std::vector<Tensor> got = (*gpu)(onGpu);
  REQUIRE(got.size() == want.size());
  int64_t compared = 0;
  for (size_t o = 0; o < want.size(); ++o) {
    CAPTURE(o);
    REQUIRE(got[o].device() == gpuUnderTest());
    Tensor host = copyTo(got[o], Device{});
    REQUIRE(host.shape() == want[o].shape());
    REQUIRE(host.dtype() == want[o].dtype());
    int64_t bad = 0, firstBad = -1;
    for (int64_t i = 0; i < host.numel(); ++i)
      if (!near(kiln::test::getElement(host, i), kiln::test::getElement(want[o], i), host.dtype(), scale) && bad++ == 0) firstBad = i;
    if (bad) {
      CAPTURE(firstBad);
      CAPTURE(kiln::test::getElement(host, firstBad));
      CAPTURE(kiln::test::getElement(want[o], firstBad));
      CAPTURE(bad);
      CHECK(bad == 0);
    }
    compared += host.numel();
  }
  return compared;
}

std::vector<kiln::kernel_ir::FusedFunction> kernelsOf(const std::string& src, bool fuse) {
  kiln::CompileOptions o;
  o.fuse = fuse;
  auto stages = kiln::compiler::runPasses(src, "emu.relay", o);
  std::vector<kiln::kernel_ir::FusedFunction> out;
  for (const kiln::ir::Function* fn : kiln::compiler::primitiveFunctions(*stages.fused))
    out.push_back(kiln::compiler::toFusedFunction(fn, "k", "emu.relay"));
  return out;
}

std::vector<Tensor> randomInputs(const kiln::kernel_ir::FusedFunction& f, const std::vector<kiln::Shape>& shapes,
                                 std::mt19937& rng) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) inputs.push_back(randomInput(f.params[i].dtype, shapes[i], rng));
  return inputs;
}

// Inputs of the parameters' shapes, each `?` 3 (or 1, where the operator
// relates dimensions that 3 would break, as collapse_sum_like's).
std::vector<Tensor> inputsFor(const kiln::kernel_ir::FusedFunction& f, std::mt19937& rng) {
  for (int64_t unknown : {3, 1}) {
    std::vector<kiln::Shape> shapes;
    for (const auto& p : f.params) {
      kiln::Shape shape;
      for (int64_t d : p.shape) shape.push_back(d < 0 ? unknown : d);
      shapes.push_back(shape);
    }
    try {
      kiln::kernel_ir::computeShapes(f, shapes);
    } catch (const kiln::Error&) {
      continue;
    }
    return randomInputs(f, shapes, rng);
  }
  FAIL("no shapes fit " << f.name);
  return {};
}

// KILN_CUDA_EMU_SWEEP=1: the longer sweep (every combination of the odd sizes).
bool sweep() {
  const char* v = std::getenv("KILN_CUDA_EMU_SWEEP");
  return v && *v && std::string(v) != "0";
}

// Whether the GPU under test can run here; says why not (the test then checks nothing).
bool emulatorAvailable() {
  std::string why = kiln::device::cudaUnavailableReason(gpuUnderTest());
  if (!why.empty()) kiln::test::skip(gpuUnderTest().toString() + " is unavailable: " + why);
  return why.empty();
}

}  // namespace

TEST_CASE("cuda-emu: every operator's GPU kernel computes what its CPU kernel computes") {
  if (!emulatorAvailable()) return;
  std::mt19937 rng(7);
  int kernels = 0;
  int64_t elements = 0;
  for (const std::string& src : kiln_test::operatorPrograms()) {
    CAPTURE(src);
    for (const auto& f : kernelsOf(src, false)) {
      if (kiln::kernel_ir::isDynamicKernel(f)) continue;
      elements += compareOnDevices(f, inputsFor(f, rng));
      ++kernels;
    }
  }
  CHECK(kernels > 150);
  CHECK(elements > 5000);
}

TEST_CASE("cuda-emu: edge guards at odd sizes along each axis") {
  if (!emulatorAvailable()) return;
  std::mt19937 rng(11);
  auto run = [&](const std::string& src, double scale = 0) {
    CAPTURE(src);
    for (const auto& f : kernelsOf(src, true)) compareOnDevices(f, inputsFor(f, rng), scale);
  };
  std::vector<int64_t> sizes = {1, 31, 33, 127, 129, 4097};
  if (sweep()) sizes.insert(sizes.end(), {2, 32, 64, 255, 256, 257, 1023, 1025, 8191, 16385});
  for (int64_t n : sizes) {
    std::string s = std::to_string(n);
    CAPTURE(n);
    // Element-wise and broadcasts (flat, grid-stride), both axes odd in turn.
    run("def @main(%x: Tensor[(3, " + s + "), float32], %y: Tensor[(" + s + "), float32]) { exp(%x) * %y + 1f }");
    run("def @main(%x: Tensor[(" + s + ", 5), float32], %y: Tensor[(" + s + ", 1), float32]) { sigmoid(%x - %y) }");
    // Rows-mode reductions: rows narrower and wider than a block, few and many rows.
    run("def @main(%x: Tensor[(3, " + s + "), float32]) { (sum(%x, axis=[1]), max(%x, axis=[1]), nn.softmax(%x)) }",
        static_cast<double>(n));
    run("def @main(%x: Tensor[(" + s + ", 300), float32]) { mean(%x, axis=[1]) }");
    run("def @main(%x: Tensor[(" + s + ", 2), float32]) { sum(%x) }", static_cast<double>(n));
    run("def @main(%x: Tensor[(2, " + s + "), int32]) { (argmax(%x, axis=[1]), prod(%x, axis=[1])) }");
  }
}

TEST_CASE("cuda-emu: normalizations, scans, pooling and data movement at odd sizes") {
  if (!emulatorAvailable()) return;
  std::mt19937 rng(17);
  auto run = [&](const std::string& src, double scale = 0) {
    CAPTURE(src);
    for (const auto& f : kernelsOf(src, true)) compareOnDevices(f, inputsFor(f, rng), scale);
  };
  std::vector<int64_t> sizes = {1, 33, 129, 4097};
  if (sweep()) sizes.insert(sizes.end(), {31, 127, 255, 257, 1025});
  for (int64_t n : sizes) {
    std::string s = std::to_string(n);
    CAPTURE(n);
    run("def @main(%x: Tensor[(3, " + s + "), float32], %g: Tensor[(" + s + "), float32], %b: Tensor[(" + s +
        "), float32]) { nn.layer_norm(%x, %g, %b) }", static_cast<double>(n));
    run("def @main(%x: Tensor[(3, " + s + "), float32]) { nn.log_softmax(%x) }", static_cast<double>(n));
    // A scan is a reduction per element (quadratic in the row): shorter rows unless sweeping.
    if (n <= 1025 || sweep())
      run("def @main(%x: Tensor[(3, " + s + "), float32]) { cumsum(%x, axis=1) }", static_cast<double>(n));
    run("def @main(%x: Tensor[(" + s + ", 5), float32]) { transpose(%x, axes=[1, 0]) }");
    run("def @main(%x: Tensor[(3, " + s + "), float32], %y: Tensor[(2, " + s + "), float32]) {"
        " (concatenate((%x, %y), axis=0), strided_slice(%x, begin=[0, 0], end=[3, " + s + "], strides=[2, 3])) }");
    run("def @main(%x: Tensor[(1, 2, " + s + ", 5), float32]) {"
        " (nn.max_pool2d(%x, pool_size=[2, 2], padding=[1, 1]), nn.avg_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1]),"
        " nn.global_avg_pool2d(%x)) }", static_cast<double>(n));
  }
}

TEST_CASE("cuda-emu: kernels of `?` shapes launch at the shapes they get") {
  if (!emulatorAvailable()) return;
  std::mt19937 rng(19);
  auto f = kernelsOf("def @main(%x: Tensor[(?, ?), float32]) { nn.softmax(%x) }", true);
  REQUIRE(f.size() == 1);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 33}, {129, 5}, {2, 4097}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    compareOnDevices(f[0], randomInputs(f[0], {kiln::Shape{rows, cols}}, rng), static_cast<double>(cols));
  }
  auto g = kernelsOf("def @main(%x: Tensor[(?, ?), float32], %w: Tensor[(?, ?), float32]) { nn.dense(%x, %w) }", true);
  REQUIRE(g.size() == 1);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {130, 3, 17}, {5, 257, 9}}) {
    CAPTURE(m);
    compareOnDevices(g[0], randomInputs(g[0], {kiln::Shape{m, k}, kiln::Shape{n, k}}, rng), 2.0 * static_cast<double>(k));
  }
}

TEST_CASE("cuda-emu: two threads, each with its own VM and stream, run kernels at once") {
  if (!emulatorAvailable()) return;
  // A loop on the host around GPU kernels: a softmax row reduction (block
  // barriers and shuffles) and a product, 20 times per thread, every result checked.
  const char* program = R"(
    def @main(%x: Tensor[(4, 300), float32], %w: Tensor[(300, 300), float32], %n: int32) {
      let %y = nn.softmax(nn.matmul(%x, %w));
      if (%n == 0) { %y } else { @main(%y * 300f, %w, %n - 1) }
    }
  )";
  kiln::CompileOptions o;
  o.devices = {gpuUnderTest()};
  auto exe = kiln::compile(program, "threads.relay", o);
  std::mt19937 rng(23);
  Tensor x = randomInput(DType::Float32, {4, 300}, rng);
  Tensor w = Tensor::empty(DType::Float32, {300, 300});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = (i % 301 == 0) ? 1.0f : 0.0f;  // the identity
  // The reference on the CPU.
  auto cpuExe = kiln::compile(program, "threads.relay");
  kiln::VirtualMachine cpuVm(cpuExe);
  Tensor want = cpuVm.copyTo(cpuVm.invoke("main", {kiln::Value(x), kiln::Value(w), kiln::Value::intScalar(DType::Int32, 2)})).tensor();
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      kiln::VirtualMachine vm(exe);
      for (int i = 0; i < 20; ++i) {
        Tensor got = vm.copyTo(vm.invoke("main", {kiln::Value(x), kiln::Value(w), kiln::Value::intScalar(DType::Int32, 2)})).tensor();
        bool ok = got.shape() == want.shape();
        for (int64_t e = 0; ok && e < got.numel(); ++e) ok = near(got.data<float>()[e], want.data<float>()[e], DType::Float32, 1);
        if (!ok) ++wrong;
        ++done;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(done == 40);
  CHECK(wrong == 0);
}

TEST_CASE("cuda-emu: a merged LSTM step (product, split, both states in one kernel) gives the CPU's results") {
  if (!emulatorAvailable()) return;
  // compiler/passes/merge_kernels.h: the step's three kernels are one, a GEMM
  // launch and one element-wise launch storing the cell and hidden states.
  const char* program = R"(
    def @main(%xs: Tensor[(6, 3, 40), float32], %w: Tensor[(192, 40), float32], %u: Tensor[(192, 48), float32],
              %b: Tensor[(192,), float32]) -> Tensor[(3, 48), float32] {
      let %loop = fn (%t: int32, %h: Tensor[(3, 48), float32], %c: Tensor[(3, 48), float32]) -> Tensor[(3, 48), float32] {
        if (%t == 6) { %h } else {
          let %g = add(nn.bias_add(nn.dense(take(%xs, %t, axis=0), %w), %b), nn.dense(%h, %u));
          let %s = split(%g, indices_or_sections=4, axis=1);
          let %c2 = add(multiply(sigmoid(%s.1), %c), multiply(sigmoid(%s.0), tanh(%s.2)));
          let %h2 = multiply(sigmoid(%s.3), tanh(%c2));
          %loop(add(%t, 1), %h2, %c2)
        }
      };
      let %z = zeros(shape=[3, 48], dtype="float32");
      %loop(0, %z, %z)
    }
  )";
  kiln::CompileOptions o;
  o.devices = {gpuUnderTest()};
  auto exe = kiln::compile(program, "lstm.relay", o);
  kiln::CompileOptions unmerged = o;
  unmerged.mergeKernels = false;
  CHECK(exe->kernels().size() + 2 == kiln::compile(program, "lstm.relay", unmerged)->kernels().size());
  std::mt19937 rng(29);
  std::vector<kiln::Value> args = {kiln::Value(randomInput(DType::Float32, {6, 3, 40}, rng)),
                                   kiln::Value(randomInput(DType::Float32, {192, 40}, rng)),
                                   kiln::Value(randomInput(DType::Float32, {192, 48}, rng)),
                                   kiln::Value(randomInput(DType::Float32, {192}, rng))};
  kiln::VirtualMachine cpuVm(kiln::compile(program, "lstm.relay"));
  Tensor want = cpuVm.invoke("main", args).tensor();
  kiln::VirtualMachine vm(exe);
  Tensor got = vm.copyTo(vm.invoke("main", args)).tensor();
  REQUIRE(got.shape() == want.shape());
  int64_t bad = 0;
  for (int64_t e = 0; e < got.numel(); ++e) bad += !near(got.data<float>()[e], want.data<float>()[e], DType::Float32, 40);
  CHECK(bad == 0);
}

namespace {

// Every kernel of `src` on the GPU against the CPU, with error bounds for a
// contraction over k.
void compareProduct(const std::string& src, int64_t k, std::mt19937& rng) {
  CAPTURE(src);
  for (const auto& f : kernelsOf(src, true)) compareOnDevices(f, inputsFor(f, rng), 2.0 * static_cast<double>(k));
}

std::string dims(int64_t a, int64_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; }

// nn.matmul of m x k by k x n, either operand transposed.
std::string matmulProgram(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  std::string a = ta ? dims(k, m) : dims(m, k), b = tb ? dims(n, k) : dims(k, n);
  return "def @main(%a: Tensor[" + a + ", float32], %b: Tensor[" + b + ", float32]) { nn.matmul(%a, %b, transpose_a=" +
         (ta ? "True" : "False") + ", transpose_b=" + (tb ? "True" : "False") + ") }";
}

}  // namespace

TEST_CASE("cuda-emu: the tiled GEMM for every transposition, batch and edge") {
  if (!emulatorAvailable()) return;
  std::mt19937 rng(13);
  auto run = [&](const std::string& src, int64_t k) { compareProduct(src, k, rng); };
  std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{1, 1, 1}, {31, 33, 7}, {129, 127, 33}, {33, 129, 129}, {128, 128, 8}};
  if (sweep()) {
    shapes.clear();
    for (int64_t m : {1, 31, 33, 127, 129})
      for (int64_t n : {1, 31, 33, 127, 129})
        for (int64_t k : {1, 7, 8, 9, 127, 129}) shapes.emplace_back(m, n, k);
  }
  for (auto [m, n, k] : shapes) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) run(matmulProgram(m, n, k, ta, tb), k);
    std::string bm = std::to_string(m), bn = std::to_string(n), bk = std::to_string(k);
    run("def @main(%x: Tensor[(3, " + bm + ", " + bk + "), float32], %w: Tensor[(3, " + bn + ", " + bk + "), float32]) {"
        " nn.batch_matmul(%x, %w) }", k);
    run("def @main(%x: Tensor[(3, " + bm + ", " + bk + "), float32], %w: Tensor[(3, " + bk + ", " + bn + "), float32]) {"
        " nn.batch_matmul(%x, %w, transpose_b=False) }", k);
    run("def @main(%x: Tensor[(" + bm + ", " + bk + "), float32], %w: Tensor[(" + bn + ", " + bk + "), float32], %b: Tensor[(" +
            bn + "), float32]) { nn.relu(nn.bias_add(nn.dense(%x, %w), %b)) }", k);
  }
  // A data operand concatenated by the product's own kernel (copied into scratch, then the GEMM).
  run("def @main(%l: Tensor[(1, 17), float32], %r: Tensor[(1, 23), float32], %w: Tensor[(9, 40), float32], %b: Tensor[(9,), float32]) {"
      " tanh(nn.bias_add(nn.dense(concatenate((%l, %r), axis=1), %w), %b)) }", 40);
  run("def @main(%x: Tensor[(2, 3, 4), float32], %y: Tensor[(2, 3, 5), float32], %w: Tensor[(2, 6, 9), float32]) {"
      " nn.batch_matmul(concatenate((%x, %y), axis=2), %w) }", 9);
  // A long K and a tall A: many K-slices and row tiles, the grid's y.
  run("def @main(%a: Tensor[(4097, 9), float32], %b: Tensor[(9, 3), float32]) { nn.matmul(%a, %b) }", 9);
  run("def @main(%a: Tensor[(2, 1030), float32], %b: Tensor[(1030, 5), float32]) { nn.matmul(%a, %b) }", 1030);
  run("def @main(%a: Tensor[(3, 4097), float32], %b: Tensor[(4097, 129), float32]) { nn.matmul(%a, %b) }", 4097);
  run("def @main(%a: Tensor[(2, 5), float32], %b: Tensor[(4097, 5), float32]) { nn.matmul(%a, %b, transpose_b=True) }", 5);
  // Convolutions: host loops over images and groups around an unfold and a product.
  run("def @main(%x: Tensor[(2, 4, 9, 7), float32], %w: Tensor[(6, 2, 3, 3), float32]) {"
      " nn.conv2d(%x, %w, padding=[1, 1], strides=[2, 1], groups=2) }", 18);
}

#if KILN_HAVE_CUDA_H
namespace {

// Hand-written GPU IR run on the emulated device through its driver, as
// GpuKernel runs generated kernels.
class IrKernels {
 public:
  IrKernels(const std::string& ir, std::vector<std::string> entries) : d_(kiln::device::CudaDriver::get(kEmu)) {
    static int counter = 0;
    std::string symbol = "kiln_emu_test_" + std::to_string(counter++);
    kiln::jit::CpuObject object = kiln::jit::compileGpuIrForHost(ir, entries, symbol);
    image_.dispatch = kiln::jit::loadObjectUncached(object.object, symbol);
    image_.entries = std::move(entries);
    image_.kernel = "test";
    d_.use(0);
    REQUIRE(d_.moduleLoadDataEx(&module_, &image_, 0, nullptr, nullptr) == CUDA_SUCCESS);
  }
  ~IrKernels() { d_.moduleUnload(module_); }

  // Launches `entry` over `blocks` x `threads` with one buffer argument;
  // returns "" or the driver's report.
  std::string launch(const char* entry, unsigned blocks, unsigned threads, void* buffer) {
    CUfunction f = nullptr;
    REQUIRE(d_.moduleGetFunction(&f, module_, entry) == CUDA_SUCCESS);
    CUdeviceptr p = reinterpret_cast<CUdeviceptr>(buffer);
    void* params[] = {&p};
    CUresult r = d_.launchKernel(f, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr);
    if (r == CUDA_SUCCESS) return "";
    const char* msg = nullptr;
    d_.getErrorString(r, &msg);
    return std::string(r == CUDA_ERROR_ILLEGAL_ADDRESS ? "illegal address: " : "launch failed: ") + (msg ? msg : "?");
  }

 private:
  const kiln::device::CudaDriver& d_;
  kiln::device::EmulatedModuleImage image_;
  CUmodule module_ = nullptr;
};

const char* kSemanticsIr = R"(
target triple = "nvptx64-nvidia-cuda"
@tile = internal addrspace(3) global [64 x i32] undef, align 4
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.laneid()
declare void @llvm.nvvm.barrier0()
declare i32 @llvm.nvvm.barrier0.popc(i32)
declare i32 @llvm.nvvm.shfl.sync.bfly.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.up.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.down.i32(i32, i32, i32, i32)
declare float @llvm.nvvm.shfl.sync.idx.f32(i32, float, i32, i32)
declare {i32, i1} @llvm.nvvm.shfl.sync.down.i32p(i32, i32, i32, i32)
declare i32 @llvm.nvvm.vote.ballot.sync(i32, i1)
declare i1 @llvm.nvvm.vote.any.sync(i32, i1)
declare i1 @llvm.nvvm.vote.all.sync(i32, i1)

; out[(block * 64 + tid) * 8 + k]: shuffles (xor 5; up 3; down 2; lane 3 of
; each 8-lane segment, as float; down 30 with its predicate), votes, lane id.
define ptx_kernel void @warps(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %v0 = mul i32 %t, 10
  %v = add i32 %v0, %b
  %x = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %v, i32 5, i32 31)
  %u = call i32 @llvm.nvvm.shfl.sync.up.i32(i32 -1, i32 %v, i32 3, i32 0)
  %d = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %v, i32 2, i32 31)
  %vf = sitofp i32 %v to float
  %if = call float @llvm.nvvm.shfl.sync.idx.f32(i32 -1, float %vf, i32 3, i32 6175)
  %i = fptosi float %if to i32
  %dp = call {i32, i1} @llvm.nvvm.shfl.sync.down.i32p(i32 -1, i32 %v, i32 30, i32 31)
  %dpv = extractvalue {i32, i1} %dp, 0
  %dpp = extractvalue {i32, i1} %dp, 1
  %dpz = zext i1 %dpp to i32
  %dpc = mul i32 %dpz, 100000
  %dps = add i32 %dpv, %dpc
  %m3 = urem i32 %t, 3
  %isz = icmp eq i32 %m3, 0
  %ballot = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 %isz)
  %is5 = icmp eq i32 %t, 5
  %any = call i1 @llvm.nvvm.vote.any.sync(i32 -1, i1 %is5)
  %lt40 = icmp ult i32 %t, 40
  %all = call i1 @llvm.nvvm.vote.all.sync(i32 -1, i1 %lt40)
  %anyi = zext i1 %any to i32
  %alli = zext i1 %all to i32
  %votes = add i32 %anyi, %alli
  %votes2 = add i32 %votes, %alli
  %lane = call i32 @llvm.nvvm.read.ptx.sreg.laneid()
  %row0 = mul i32 %b, 64
  %row1 = add i32 %row0, %t
  %row = mul i32 %row1, 8
  %p0 = getelementptr i32, ptr %out, i32 %row
  store i32 %x, ptr %p0
  %p1 = getelementptr i32, ptr %p0, i32 1
  store i32 %u, ptr %p1
  %p2 = getelementptr i32, ptr %p0, i32 2
  store i32 %d, ptr %p2
  %p3 = getelementptr i32, ptr %p0, i32 3
  store i32 %i, ptr %p3
  %p4 = getelementptr i32, ptr %p0, i32 4
  store i32 %dps, ptr %p4
  %p5 = getelementptr i32, ptr %p0, i32 5
  store i32 %ballot, ptr %p5
  %p6 = getelementptr i32, ptr %p0, i32 6
  store i32 %votes2, ptr %p6
  %p7 = getelementptr i32, ptr %p0, i32 7
  store i32 %lane, ptr %p7
  ret void
}

; Every thread writes its slot of shared memory, waits, then reads two others':
; right only if the barrier holds every thread until all have written.
define ptx_kernel void @neighbours(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %sq = mul i32 %t, %t
  %val = add i32 %sq, %b
  %mine = getelementptr [64 x i32], ptr addrspace(3) @tile, i32 0, i32 %t
  store i32 %val, ptr addrspace(3) %mine
  call void @llvm.nvvm.barrier0()
  %n1 = add i32 %t, 1
  %n = urem i32 %n1, 64
  %mirror = sub i32 63, %t
  %pn = getelementptr [64 x i32], ptr addrspace(3) @tile, i32 0, i32 %n
  %pm = getelementptr [64 x i32], ptr addrspace(3) @tile, i32 0, i32 %mirror
  %a = load i32, ptr addrspace(3) %pn
  %c = load i32, ptr addrspace(3) %pm
  %s = add i32 %a, %c
  %m4 = urem i32 %t, 4
  %q = icmp eq i32 %m4, 0
  %qi = zext i1 %q to i32
  %count = call i32 @llvm.nvvm.barrier0.popc(i32 %qi)
  %k = mul i32 %count, 1000000
  %r = add i32 %s, %k
  %row0 = mul i32 %b, 64
  %row = add i32 %row0, %t
  %p = getelementptr i32, ptr %out, i32 %row
  store i32 %r, ptr %p
  ret void
}

; A barrier only the first 16 threads reach.
define ptx_kernel void @divergent(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %few = icmp ult i32 %t, 16
  br i1 %few, label %wait, label %done
wait:
  call void @llvm.nvvm.barrier0()
  br label %done
done:
  ret void
}

; Lanes of one warp at two different shuffles.
define ptx_kernel void @split_warp(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %few = icmp ult i32 %t, 16
  br i1 %few, label %one, label %other
one:
  %x = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %t, i32 1, i32 31)
  br label %done
other:
  %y = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %t, i32 2, i32 31)
  br label %done
done:
  ret void
}

; Atomics on global and shared memory: every thread of every block adds 1 to
; out[0] and its block's shared counter; thread 0 adds the block's total to out[1].
define ptx_kernel void @atomics(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %counter = getelementptr [64 x i32], ptr addrspace(3) @tile, i32 0, i32 0
  %first = icmp eq i32 %t, 0
  br i1 %first, label %clear, label %go
clear:
  store i32 0, ptr addrspace(3) %counter
  br label %go
go:
  call void @llvm.nvvm.barrier0()
  %g = atomicrmw add ptr %out, i32 1 seq_cst
  %s = atomicrmw add ptr addrspace(3) %counter, i32 1 seq_cst
  call void @llvm.nvvm.barrier0()
  br i1 %first, label %total, label %done
total:
  %n = load i32, ptr addrspace(3) %counter
  %o1 = getelementptr i32, ptr %out, i32 1
  %old = atomicrmw add ptr %o1, i32 %n seq_cst
  br label %done
done:
  ret void
}

; out[tid] = tid, for every thread of the launch.
define ptx_kernel void @fill(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %p = getelementptr i32, ptr %out, i32 %t
  store i32 %t, ptr %p
  ret void
}
)";

std::vector<int32_t> readBack(void* p, size_t n) {
  std::vector<int32_t> out(n);
  kiln::device::copyBytes(out.data(), Device{}, p, kEmu, n * sizeof(int32_t));
  return out;
}

}  // namespace

// Products of at most kGpuSkinnyRows rows take the skinny entry (a warp per
// column, lanes over K, partial sums for 1, 2, 4, 8 or 16 rows); 17 rows the
// tiled one. Every row count's variant, both transpositions, a batch, more
// columns than the grid covers at once (grid-stride), K under and over a warp.
TEST_CASE("cuda-emu: the skinny GEMM for every row count, transposition and batch") {
  if (!emulatorAvailable()) return;
  std::mt19937 rng(17);
  auto run = [&](const std::string& src, int64_t k) { compareProduct(src, k, rng); };
  for (int64_t m : {1, 2, 3, 5, 9, 16, 17})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{300, 77}, {33, 1}}) {
      CAPTURE(m);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) run(matmulProgram(m, n, k, ta, tb), k);
      run("def @main(%x: Tensor[(3, " + std::to_string(m) + ", " + std::to_string(k) + "), float32], %w: Tensor[(3, " +
              std::to_string(n) + ", " + std::to_string(k) + "), float32]) { nn.batch_matmul(%x, %w) }",
          k);
    }
  // `?` rows: the host picks the entry per call, at the rows it gets.
  auto dyn = kernelsOf("def @main(%x: Tensor[(?, 40), float32], %w: Tensor[(70, 40), float32]) { nn.dense(%x, %w) }", true);
  for (int64_t rows : {1, 6, 16, 17, 40})
    for (const auto& f : dyn) {
      CAPTURE(rows);
      compareOnDevices(f, randomInputs(f, {kiln::Shape{rows, 40}, kiln::Shape{70, 40}}, rng), 80.0);
    }
}

TEST_CASE("cuda-emu: barriers, warp shuffles and votes follow CUDA's semantics") {
  IrKernels k(kSemanticsIr, {"warps", "neighbours", "divergent", "split_warp", "fill", "atomics"});
  Tensor out = Tensor::empty(DType::Int32, {2 * 64 * 8}, kEmu);

  REQUIRE(k.launch("warps", 2, 64, out.data()) == "");
  std::vector<int32_t> got = readBack(out.data(), 2 * 64 * 8);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 64; ++t) {
      CAPTURE(b);
      CAPTURE(t);
      int lane = t % 32, warp0 = t - lane;
      auto v = [&](int l) { return (warp0 + l) * 10 + b; };
      const int32_t* r = &got[static_cast<size_t>((b * 64 + t) * 8)];
      CHECK(r[0] == v(lane ^ 5));                         // __shfl_xor_sync(v, 5)
      CHECK(r[1] == (lane >= 3 ? v(lane - 3) : v(lane)));  // __shfl_up_sync(v, 3)
      CHECK(r[2] == (lane + 2 < 32 ? v(lane + 2) : v(lane)));  // __shfl_down_sync(v, 2)
      CHECK(r[3] == v((lane & ~7) + 3));                  // __shfl_sync(v, 3, width 8)
      CHECK(r[4] == (lane + 30 < 32 ? v(lane + 30) + 100000 : v(lane)));  // shfl.down with its predicate
      uint32_t ballot = 0;
      for (int l = 0; l < 32; ++l)
        if ((warp0 + l) % 3 == 0) ballot |= 1u << l;
      CHECK(static_cast<uint32_t>(r[5]) == ballot);
      CHECK(r[6] == (warp0 == 0 ? 1 + 2 : 0));  // any(t == 5) + 2 * all(t < 40), per warp
      CHECK(r[7] == lane);
    }

  REQUIRE(k.launch("neighbours", 2, 64, out.data()) == "");
  got = readBack(out.data(), 2 * 64);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 64; ++t) {
      auto sq = [&](int x) { return x * x + b; };
      CHECK(got[static_cast<size_t>(b * 64 + t)] == sq((t + 1) % 64) + sq(63 - t) + 16 * 1000000);
    }

  std::string report = k.launch("divergent", 1, 64, out.data());
  CHECK(report.find("launch failed: kernel test (entry divergent): barrier #") == 0);
  CHECK(report.find("is reached by 16 of the 64 threads of block (0,0,0); the others have exited") != std::string::npos);

  report = k.launch("split_warp", 1, 32, out.data());
  CHECK(report.find("launch failed: ") == 0);
  CHECK(report.find("wait at different warp-wide operations") != std::string::npos);

  std::vector<int32_t> zero(2, 0);
  kiln::device::copyBytes(out.data(), kEmu, zero.data(), Device{}, 2 * sizeof(int32_t));
  REQUIRE(k.launch("atomics", 3, 96, out.data()) == "");
  got = readBack(out.data(), 2);
  CHECK(got[0] == 3 * 96);
  CHECK(got[1] == 3 * 96);

  // The emulator is usable again after a failed launch.
  REQUIRE(k.launch("fill", 1, 64, out.data()) == "");
  got = readBack(out.data(), 64);
  for (int t = 0; t < 64; ++t) CHECK(got[static_cast<size_t>(t)] == t);
}

TEST_CASE("cuda-emu: invalid global accesses are reported like memcheck, and do not land") {
  IrKernels k(kSemanticsIr, {"fill"});
  SUBCASE("past the end of an allocation") {
    Tensor small = Tensor::empty(DType::Int32, {60}, kEmu);
    Tensor next = Tensor::empty(DType::Int32, {64}, kEmu);
    REQUIRE(k.launch("fill", 1, 64, next.data()) == "");
    std::string report = k.launch("fill", 1, 64, small.data());
    CAPTURE(report);
    CHECK(report.find("illegal address: kernel test (entry fill): invalid write of 4 bytes at 0x") == 0);
    CHECK(report.find("by thread (60,0,0) of block (0,0,0): 4 bytes past the end of a 240-byte allocation") != std::string::npos);
    CHECK(report.find("(and 3 more invalid accesses in that block)") != std::string::npos);
    // The writes were not made: the neighbour is intact, the tensor's first 60 are written.
    std::vector<int32_t> got = readBack(next.data(), 64);
    for (int t = 0; t < 64; ++t) CHECK(got[static_cast<size_t>(t)] == t);
    got = readBack(small.data(), 60);
    CHECK(got[59] == 59);
  }
  SUBCASE("a block the pool has taken back") {
    void* stale = nullptr;
    {
      Tensor t = Tensor::empty(DType::Int32, {64}, kEmu);
      stale = t.data();
    }
    std::string report = k.launch("fill", 1, 4, stale);
    CAPTURE(report);
    CHECK(report.find("invalid write of 4 bytes") != std::string::npos);
    CHECK(report.find("that has been freed (use after free)") != std::string::npos);
  }
  SUBCASE("reads may reach the end of the tensor's last 64-byte line, as the pool promises; writes may not") {
    // A kernel reading a clamped index of an empty tensor (concatenate's pieces)
    // stays inside the line every block has.
    Tensor empty = Tensor::empty(DType::Int32, {0}, kEmu);
    void* p = empty.data();
    std::string report = k.launch("fill", 1, 1, p);
    CAPTURE(report);
    CHECK(report.find("invalid write of 4 bytes") != std::string::npos);
    CHECK(report.find("4 bytes past the end of a 0-byte allocation") != std::string::npos);
  }
  SUBCASE("host copies are checked too") {
    Tensor t = Tensor::empty(DType::Int32, {10}, kEmu);
    std::vector<int32_t> host(17);
    CHECK_THROWS_WITH_AS(kiln::device::copyBytes(host.data(), Device{}, t.data(), kEmu, 17 * sizeof(int32_t)),
                         doctest::Contains("reads outside the emulated device's memory: 68 bytes from offset 0 of a 64-byte allocation"),
                         kiln::Error);
    CHECK_THROWS_WITH_AS(kiln::device::copyBytes(t.data(), kEmu, host.data(), Device{}, 11 * sizeof(int32_t)),
                         doctest::Contains("writes outside the emulated device's memory: 44 bytes from offset 0 of a 40-byte allocation"),
                         kiln::Error);
  }
}

TEST_CASE("cuda-emu: a generated kernel's missing edge guard is caught at its launch") {
  // out[i + 1] = in[i] for i < n: the kind of indexing slip the GPU plan's
  // edge guards exist for, found by the emulator as the kernel runs.
  kiln::loop::LoopKernel k;
  k.name = "shifted_copy";
  k.buffers.push_back({DType::Float32, false, "in"});
  k.buffers.push_back({DType::Float32, true, "out"});
  kiln::loop::LoopBuilder b(k);
  int32_t i = b.newVar();
  k.body = b.forLoop(i, b.intConst(33), kiln::loop::LoopKind::Parallel,
                     {b.store(1, b.add(b.var(i), b.intConst(1)), b.load(0, b.var(i)))});
  kiln::jit::EmulatedGpuObject compiled = kiln::jit::codegenBackend().compileGpuEmulated(k, "kiln_emu_test_shifted", false);
  kiln::jit::GpuKernel kernel(k, compiled.plan, kEmu, kiln::jit::loadObjectUncached(compiled.object.object, "kiln_emu_test_shifted"));
  Tensor in = Tensor::empty(DType::Float32, {33}, kEmu), out = Tensor::empty(DType::Float32, {33}, kEmu);
  void* buffers[] = {in.data(), out.data()};
  int64_t shapes[1] = {0};
  bool synchronous = false;
  kiln::device::CudaStream& stream = kiln::device::streamFor(kEmu, synchronous);
  CHECK_THROWS_WITH_AS(kernel.run(buffers, shapes, 0, stream),
                       doctest::Contains("kernel shifted_copy (entry kiln_emu_test_shifted_0): invalid write of 4 bytes"),
                       kiln::Error);
}
#endif
