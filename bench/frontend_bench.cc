// Front-end throughput: parse + type-check of a generated ~10 MB program, in MB/s
// and bindings/s, printed next to this machine's memory copy bandwidth measured in
// the same run (the ratio says how far from "as fast as reading the bytes" we are);
// and the whole compiler's time per field of a very wide tuple at two sizes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/frontend.h"
#include "compiler/ir/printer.h"
#include "compiler/parser/parser.h"
#include "compiler/parser/prelude.h"
#include "compiler/typecheck/infer.h"
#include "kiln/compile.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A program of many functions, each a chain of graph-style and let bindings over
// operators with attributes, a closure, an if and a match, calling the previous one.
std::string generate(size_t targetBytes, size_t& bindings) {
  std::string s = "#[version = \"0.0.5\"]\n";
  bindings = 0;
  for (int f = 0; s.size() < targetBytes; ++f) {
    s += "def @f" + std::to_string(f) +
         "(%x: Tensor[(?, 64), float32], %w: Tensor[(64, 64), float32], %b: Tensor[(64,), float32], %n: int32,"
         " %xs: List[Tensor[(?, 64), float32]]) -> Tensor[(?, 64), float32] {\n";
    s += "  %0 = nn.dense(%x, %w, units=64);\n";
    int last = 0;
    for (int k = 1; k < 40; ++k) {
      std::string prev = "%" + std::to_string(k - 1);
      switch (k % 5) {
        case 0: s += "  %" + std::to_string(k) + " = nn.bias_add(" + prev + ", %b, axis=-1);\n"; break;
        case 1: s += "  %" + std::to_string(k) + " = nn.relu(" + prev + ");\n"; break;
        case 2: s += "  %" + std::to_string(k) + " = multiply(" + prev + ", 0.5f);\n"; break;
        case 3: s += "  %" + std::to_string(k) + " = add(" + prev + ", %x);\n"; break;
        case 4: s += "  %" + std::to_string(k) + " = clip(" + prev + ", a_min=-6f, a_max=6f);\n"; break;
      }
      last = k;
    }
    bindings += 40;
    s += "  let %scale = fn (%t: Tensor[(?, 64), float32]) { %t * 2f };\n";
    s += "  let %ys = @map(%scale, %xs);\n";
    s += "  let %total = sum(%" + std::to_string(last) + ", axis=[1], keepdims=True);\n";
    bindings += 3;
    s += "  let %r = match (%ys) { Cons(%h, _) => %h + %total, Nil => %" + std::to_string(last) + " };\n";
    bindings += 1;
    if (f == 0) {
      s += "  %r\n}\n";
    } else {
      s += "  if (%n > 0) { @f" + std::to_string(f - 1) + "(%r, %w, %b, %n - 1, %ys) } else { %r }\n}\n";
    }
  }
  return s;
}

double copyBandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    auto t1 = Clock::now();
    best = std::min(best, seconds(t0, t1));
    a[static_cast<size_t>(r)] = b[bytes - 1 - static_cast<size_t>(r)];
  }
  return 2.0 * static_cast<double>(bytes) / best;  // read + write
}

}  // namespace

int main() {
  size_t bindings = 0;
  std::string program = generate(10u << 20, bindings);
  double mb = static_cast<double>(program.size()) / 1e6;

  double bestParse = 1e30, bestCheck = 1e30, bestPrint = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    kiln::compiler::onCompilerStack([&] {
      auto m = std::make_unique<kiln::ir::Module>(std::make_shared<kiln::ir::Arena>(), "bench.relay");
      kiln::parser::parseInto(*m, kiln::parser::preludeSource(), "<prelude>", true);
      auto t0 = Clock::now();
      kiln::parser::parseInto(*m, program, "bench.relay");
      auto t1 = Clock::now();
      kiln::typecheck::inferTypes(*m);
      auto t2 = Clock::now();
      std::string text = kiln::ir::printModule(*m);
      auto t3 = Clock::now();
      bestParse = std::min(bestParse, seconds(t0, t1));
      bestCheck = std::min(bestCheck, seconds(t1, t2));
      bestPrint = std::min(bestPrint, seconds(t2, t3));
      if (text.size() < program.size() / 2) std::printf("unexpected printer output size\n");
    });
  }
  double total = bestParse + bestCheck;
  double bw = copyBandwidth(program.size() * 8);
  std::printf("front end on a generated program: %.2f MB, %zu bindings\n", mb, bindings);
  std::printf("  parse            %8.1f ms  %8.1f MB/s\n", bestParse * 1e3, mb / bestParse);
  std::printf("  type-check       %8.1f ms  %8.1f MB/s\n", bestCheck * 1e3, mb / bestCheck);
  std::printf("  parse+check      %8.1f ms  %8.1f MB/s  %10.0f bindings/s\n", total * 1e3, mb / total,
              static_cast<double>(bindings) / total);
  std::printf("  print            %8.1f ms  %8.1f MB/s\n", bestPrint * 1e3, mb / bestPrint);
  std::printf("machine limit: memory copy bandwidth %.1f GB/s; parse+check / copy bandwidth = %.5f\n", bw / 1e9,
              (mb * 1e6 / total) / bw);

  // The whole compiler (every pass and bytecode emission) on one very wide
  // value: a tuple of n kernel results. Near-linear passes keep the time per
  // field flat as n grows 8x.
  std::printf("whole compile of a tuple of n fields (each a kernel call):\n");
  double first = 0;
  for (size_t n : {25000u, 200000u}) {
    std::string wide = "def @main(%x: float32) { let %t = (";
    for (size_t i = 0; i < n; ++i) wide += i ? ", %x + 1f" : "%x + 1f";
    wide += "); %t }\n";
    double best = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      auto t0 = Clock::now();
      auto exe = kiln::compile(wide, "wide.relay");
      best = std::min(best, seconds(t0, Clock::now()));
    }
    double perField = best / static_cast<double>(n) * 1e6;
    if (!first) first = perField;
    std::printf("  n = %7zu  %8.1f ms  %6.2f us per field (%.2fx the smallest n's)\n", n, best * 1e3, perField, perField / first);
  }
  return 0;
}
