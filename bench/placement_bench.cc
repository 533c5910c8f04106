// Device placement on a generated module of 10,000 functions: a call chain with
// higher-order calls (each function passes a global to @map over a list of
// tensors), mutual recursion pairs and on_device demands on both devices, so
// unification, soft edges and specialization all do work. Prints the placement
// time against the 1 s budget, and how it grows from 2,500 to 10,000 functions
// (near-linear: the ratio stays near 4).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/ir/arena.h"
#include "compiler/passes/device_placement.h"
#include "compiler/passes/fuse_ops.h"
#include "compiler/passes/lambda_lift.h"
#include "compiler/passes/to_anf.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string generate(int n) {
  std::string s = "#[version = \"0.0.5\"]\n";
  const std::string T = "Tensor[(4), float32]";
  for (int f = 0; f < n; ++f) {
    std::string name = "@f" + std::to_string(f);
    std::string next = f + 1 < n ? "@f" + std::to_string(f + 1) : "";
    s += "def " + name + "(%x: " + T + ", %xs: List[" + T + "], %k: int32) -> " + T + " {\n";
    s += "  let %a = tanh(%x * 0.5f) + %x;\n";
    s += "  let %ys = @map(@g" + std::to_string(f % 16) + ", %xs);\n";
    if (f % 50 == 0) s += "  let %a = on_device(%a * 2f, device=\"cpu\");\n";
    if (f % 70 == 0) s += "  let %a = on_device(%a + 1f, device=\"cpu:1\");\n";
    s += "  let %b = if (%k > 0) { %a } else { %a - 1f };\n";
    if (next.empty()) s += "  %b\n}\n";
    else s += "  " + next + "(%b, %ys, %k - 1)\n}\n";
  }
  for (int g = 0; g < 16; ++g) s += "def @g" + std::to_string(g) + "(%x: " + T + ") -> " + T + " { sigmoid(%x) * " + std::to_string(g) + "f }\n";
  s += "def @main(%x: " + T + ", %xs: List[" + T + "]) -> " + T + " { @f0(%x, %xs, 3) }\n";
  return s;
}

double placeMillis(int n, size_t& copies, size_t& clones, int& rounds) {
  std::string src = generate(n);
  auto typed = kiln::compiler::loadProgram(src, "generated.relay", {});
  auto fused = kiln::compiler::fuseOps(*typed, {});
  auto anf = kiln::compiler::toANF(*fused);
  auto lifted = kiln::compiler::lambdaLift(*anf);
  std::vector<double> times;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    auto placed = kiln::compiler::placeDevices(*lifted, {kiln::Device{kiln::Device::Kind::CPU, 1}, kiln::Device{}});
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    copies = placed.copies.size();
    clones = placed.specializations.size();
    rounds = placed.rounds;
  }
  std::sort(times.begin(), times.end());
  return times[1];
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  return kiln::compiler::onCompilerStack([n] {
    size_t copies = 0, clones = 0;
    int rounds = 0;
    double small = placeMillis(n / 4, copies, clones, rounds);
    double ms = placeMillis(n, copies, clones, rounds);
    std::printf("placement of %d functions (cpu:1,cpu): %.1f ms, median of 3; budget 1000 ms: %.3f of it\n", n, ms, ms / 1000.0);
    std::printf("  %zu copies inserted, %zu specializations, %d round%s\n", copies, clones, rounds, rounds == 1 ? "" : "s");
    std::printf("  growth %d -> %d functions: %.1f ms -> %.1f ms (x%.2f for x4 the functions)\n", n / 4, n, small, ms, ms / small);
    return 0;
  });
}
