// VM benchmarks: dispatch cost of a scalar loop, of a function call, VM overhead
// per kernel call (a chain of tiny kernels), and executable load time for the
// samples. Figures are printed next to IREE's published 43-55 ns per bytecode call.
#include <cstdio>
#include <string>

#include "jit/kernel.h"
#include "runtime/kernel_table.h"
#include "kiln/compile.h"
#include "kiln/npy.h"
#include "kiln/vm.h"
#include "machine_limits.h"

using kiln::Tensor;
using kiln::Value;
using kiln::bench::bestSeconds;
using kiln::bench::bestSecondsAlternating;

namespace {

const char* kProgram = R"(
def @loop(%n: int32, %acc: int32) -> int32 {
  if (%n == 0) { %acc } else { @loop(%n - 1, %acc + 1) }
}
def @one(%x: int32) -> int32 { %x }
def @calls(%n: int32, %acc: int32) -> int32 {
  if (%n == 0) { %acc } else { @calls(%n - 1, @one(%acc + 1)) }
}
def @chain(%n: int32, %t: Tensor[(1,), float32]) -> Tensor[(1,), float32] {
  if (%n == 0) { %t } else { @chain(%n - 1, exp(%t) * 0f + %t) }
}
def @main(%t: Tensor[(1,), float32]) -> Tensor[(1,), float32] { exp(%t) * 0f + %t }
)";

}  // namespace

int main() {
  auto exe = kiln::compile(kProgram, "vm_bench.relay");
  kiln::VirtualMachine vm(exe);
  const int n = 1'000'000;
  Value vn = Value::intScalar(kiln::DType::Int32, n), zero = Value::intScalar(kiln::DType::Int32, 0);

  // Kernel calls: a loop whose body is one fused kernel on a 1-element tensor,
  // against the same kernel called directly (allocation included in both).
  Tensor t = kiln::Tensor::empty(kiln::DType::Float32, {1});
  t.data<float>()[0] = 1;
  Value vt(t);
  const int k = 200'000;
  Value vk = Value::intScalar(kiln::DType::Int32, k);
  vm.invoke("chain", {vk, vt});  // compile
  // The kernel alone: the one kernel of @main, run directly (destination passing).
  uint32_t kernelIndex = 0;
  for (uint32_t i = 0; i < exe->kernels().size(); ++i)
    if (exe->kernels()[i].kind == kiln::KernelKind::Compiled) kernelIndex = i;
  auto table = kiln::Runtime::processDefault()->kernelTable(exe);
  const auto& kernel = table->compiled(kernelIndex);
  Tensor out = kiln::Tensor::empty(kiln::DType::Float32, {1});

  // Every figure below is a difference of these, so they are timed by turns.
  // Scalar loop: per iteration a compare, a branch, two host-scalar kernels and a
  // tail call; calls: the same plus a non-tail call and return per iteration.
  auto [loopS, callsS, chainS, bareS] = bestSecondsAlternating(
      9, [&] { vm.invoke("loop", {vn, zero}); }, [&] { vm.invoke("calls", {vn, zero}); },
      [&] { vm.invoke("chain", {vk, vt}); },
      [&] {
        for (int i = 0; i < k; ++i) kernel.run(std::span<const Tensor>(&t, 1), std::span<const Tensor>(&out, 1));
      });
  double loop = loopS / n * 1e9, calls = callsS / n * 1e9, perKernel = chainS / k * 1e9, bare = bareS / k * 1e9;
  std::printf("scalar loop:   %6.1f ns per iteration (5 instructions: %.1f ns each)\n", loop, loop / 5);
  std::printf("function call: %6.1f ns per call and return (IREE publishes 43-55 ns per bytecode call: ratio %.2f)\n",
              calls - loop, (calls - loop) / 49.0);
  std::printf("kernel call:   %6.1f ns per iteration with one kernel; the kernel alone %.1f ns; VM overhead %.1f ns "
              "(allocation, shape checks, dispatch; IREE ratio %.2f)\n",
              perKernel, bare, perKernel - bare - loop, (perKernel - bare - loop) / 49.0);

  // Executable load time for the samples (serialized, then loaded and verified).
  for (const char* s : {"tree_sum", "lstm_list", "grow_loop", "mlp", "cnn"}) {
    kiln::CompileOptions opts;
    std::string dir = KILN_SOURCE_DIR "/samples/";
    if (std::string(s) == "mlp" || std::string(s) == "cnn") opts.params = kiln::readNpz(dir + s + "_weights.npz");
    auto e = kiln::compileFile(dir + s + ".relay", opts);
    std::string path = "/tmp/kiln_bench_" + std::string(s) + ".kx";
    e->save(path);
    std::vector<uint8_t> image = e->serialize();
    double load = bestSeconds(20, [&] { kiln::Executable::load(path); });
    std::printf("load %-10s %8zu bytes: %7.1f us (map, checksum, parse, verify)\n", s, image.size(), load * 1e6);
    std::remove(path.c_str());
  }
  return 0;
}
