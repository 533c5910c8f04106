// Tuning: schedules (text, legality, same results), tuning logs (errors, foreign
// CPUs, nearest shapes), the JIT applying them, task extraction from a program
// with a loop over a list, recursion and `?` shapes, and the search surviving
// workers that crash or hang.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <fstream>

#include "device/cpu_limits.h"
#include "device/thread_pool.h"
#include "jit/gemm.h"
#include "jit/host_cpu.h"
#include "jit/kernel.h"
#include "jit/tuning_log.h"
#include "kernel_ir/lower.h"
#include "kernel_ir/schedule.h"
#include "kiln/compile.h"
#include "kiln/memory.h"
#include "kiln/vm.h"
#include "kernel_util.h"
#include "runtime/kernel_table.h"
#include "tune/measure.h"
#include "tune/tasks.h"
#include "tune/tuner.h"
#include "tune/work_bound.h"
#include "test_skip.h"

using namespace kiln;
using loop::Schedule;

namespace {

Schedule parsed(const std::string& text) {
  std::string why;
  auto s = Schedule::parse(text, &why);
  INFO(why);
  REQUIRE(s.has_value());
  return *s;
}

// The kernel at `schedule` computes what the default computes.
void checkSameResult(const std::string& src, const std::vector<Shape>& shapes, const std::string& schedule) {
  INFO(src, " at ", schedule);
  tune::MeasureOptions o;
  o.rounds = 2;
  o.roundMillis = 0.05;
  tune::Measurement m = tune::measureInProcess(test::fusedFrom(src), shapes, parsed(schedule), o);
  INFO(m.error);
  CHECK(m.ok);
  CHECK(m.maxError <= 1e-5);
  CHECK(m.micros > 0);
}

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_tuning_" + std::to_string(getpid()) + "_" + name)).string();
}

std::string record(const std::string& task, const std::string& shapes, const std::string& schedule, double us,
                   const std::string& cpu = jit::hostCpuFingerprint()) {
  jit::TuningRecord r;
  r.task = task;
  r.shapes = *jit::parseShapes(shapes);
  r.schedule = parsed(schedule);
  r.micros = us;
  r.defaultMicros = 2 * us;
  r.machine = "test";
  r.cpu = cpu;
  return jit::TuningLog::format(r) + "\n";
}

int countLoops(const loop::LoopKernel& k, loop::StmtId s) {
  const loop::StmtNode& n = k.stmt(s);
  int c = n.kind == loop::StmtKind::For ? 1 : 0;
  for (loop::StmtId b : n.body) c += countLoops(k, b);
  for (loop::StmtId b : n.orElse) c += countLoops(k, b);
  return c;
}

}  // namespace

TEST_CASE("a schedule's text names what differs from the default, and reads back") {
  CHECK(Schedule{}.toString() == "default");
  CHECK(Schedule{}.isDefault());
  Schedule s = parsed(
      "order=1:0,tile=32:8,vec=8,interleave=2,unroll=4,parallel=0,grain=-2,conv=gemm,kc=256,mc=4,micro=1,pack_a=1,narrow=dot");
  CHECK(s.gemmNarrow == 2);
  CHECK(parsed("narrow=panels").gemmNarrow == 1);
  CHECK(parsed("narrow=panels").toString() == "narrow=panels");
  CHECK_FALSE(parsed("then=after").gemmThenInThreads);
  CHECK(parsed("then=after").toString() == "then=after");
  CHECK(parsed("then=threads").isDefault());
  CHECK_FALSE(parsed("winograd=0").convWinograd);
  CHECK(parsed("winograd=0").toString() == "winograd=0");
  CHECK(parsed("winograd=1").isDefault());  // (what logs before the 4x4 tiles wrote)
  CHECK(parsed("winograd=2").isDefault());
  CHECK(parsed("winograd=4").convWinograd == 4);
  CHECK(parsed("winograd=4").toString() == "winograd=4");
  CHECK(s.gemmKC == 256);
  CHECK(s.gemmMCTiles == 4);
  CHECK(s.gemmTile == 1);
  CHECK(s.gemmPackA);
  CHECK(s.order == std::vector<int32_t>{1, 0});
  CHECK(s.tile == std::vector<int64_t>{32, 8});
  CHECK(s.vectorWidth == 8);
  CHECK(s.interleave == 2);
  CHECK(!s.parallel);
  CHECK(!s.directConv);
  CHECK(parsed(s.toString()) == s);
  // An identity order and no tiles are the default.
  CHECK(parsed("order=0:1:2,tile=0:0:0").toString() == "default");
  for (const char* bad : {"", "vec=3", "vec", "order=0:0", "order=1:0,tile=8", "speed=11", "parallel=2", "tile=-4",
                          "interleave=0", "grain=99", "conv=winograd", "kc=100", "kc=2048", "mc=0", "micro=2", "micro=-1",
                          "pack_a=2", "narrow=1", "narrow=", "narrow=rows", "winograd=3", "winograd=8", "winograd="}) {
    std::string why;
    INFO(bad);
    CHECK(!Schedule::parse(bad, &why).has_value());
    CHECK(!why.empty());
  }
}

TEST_CASE("loop order and tiles are applied where legal, and every schedule computes the default's result") {
  const std::string add2d =
      "def @main(%x: Tensor[(70, 130), float32], %y: Tensor[(130,), float32]) { tanh(%x) + %y }";
  loop::LoopKernel plain = kernel_ir::lowerToLoops(test::fusedFrom(add2d), {.directConv = true, .gemmPostOps = true});
  loop::LoopKernel tiled = plain;
  loop::applySchedule(tiled, parsed("order=1:0,tile=16:32"));
  CHECK(countLoops(tiled, tiled.body) == 4);  // two tile loops, two point loops
  CHECK(countLoops(plain, plain.body) == 2);
  CHECK(loop::scheduleSpaceOf(plain).nestDepth == 2);

  for (const char* s : {"order=1:0", "tile=16:32", "order=1:0,tile=7:64", "tile=0:5", "vec=4,interleave=4", "unroll=8",
                        "parallel=0", "grain=-8", "order=1:0,tile=64:3,vec=16,parallel=0"})
    checkSameResult(add2d, {{70, 130}, {130}}, s);
  // A transpose (reads and writes cross), a reduction over rows, a product and an arg-reduction.
  checkSameResult("def @main(%x: Tensor[(96, 40), float32]) { transpose(%x) * 2f }", {{96, 40}}, "order=1:0,tile=8:8");
  checkSameResult("def @main(%x: Tensor[(3, 64, 50), float32]) { mean(%x, axis=[2]) }", {{3, 64, 50}},
                  "order=1:0,tile=0:16,unroll=4");
  checkSameResult("def @main(%x: Tensor[(33, 20), float32]) { prod(%x, axis=[1]) }", {{33, 20}}, "unroll=2,vec=8");
  checkSameResult("def @main(%x: Tensor[(33, 20), float32]) { argmax(%x, axis=[1]) }", {{33, 20}}, "parallel=0,unroll=4");
  // `?` dimensions: tiles with run-time remainders.
  checkSameResult("def @main(%x: Tensor[(?, ?), float32]) { exp(%x) * %x }", {{37, 300}}, "order=1:0,tile=16:128");
  // Dense and convolution: parallel and algorithm choices.
  checkSameResult("def @main(%x: Tensor[(4, 64), float32], %w: Tensor[(32, 64), float32]) { nn.relu(nn.dense(%x, %w)) }",
                  {{4, 64}, {32, 64}}, "parallel=0");
  // GEMM blocking: the contraction slice and rows per task (B prepacked, as a constant weight is).
  // The micro-kernel tile and A packing too (the wide tile's B packed for it once:
  // the prepared operand asks for the tile's panels, transB kept in bit 0).
  {
    loop::LoopKernel dense = kernel_ir::lowerToLoops(
        test::fusedFrom("def @main(%x: Tensor[(40, 300), float32], %w: Tensor[(70, 300), float32]) { nn.dense(%x, %w) }"),
        {.directConv = true, .gemmPostOps = true});
    loop::applySchedule(dense, parsed("micro=1"));
    int prepared = 0;
    for (const loop::BufferDecl& b : dense.buffers)
      if (b.isPrepared()) {
        ++prepared;
        CHECK(b.preparedParam == (1 << 1 | 1));  // the wide tile; nn.dense's weight is stored n x k
      }
    CHECK(prepared == 1);
    Tensor w = Tensor::empty(DType::Float32, {70, 300});
    Tensor packed = runtime::packWeight(w, loop::PreparedLayout::GemmB, 3, MemoryPools::processDefault().forDevice(Device{}));
    REQUIRE(packed.defined());
    CHECK(jit::packedBMatches(packed.data<float>(), 300, 70, 1));
    CHECK(!runtime::packWeight(w, loop::PreparedLayout::GemmB, 1 << 3, MemoryPools::processDefault().forDevice(Device{}))
               .defined());  // no such tile
  }
  // The micro-kernel tile and A packing too (the wide tile's B packed for it once).
  for (const char* s : {"kc=64,mc=1", "kc=1024,mc=3", "kc=256,mc=16,parallel=0", "micro=1", "micro=1,pack_a=1,kc=64",
                        "pack_a=1,mc=2"})
    checkSameResult("def @main(%x: Tensor[(40, 300), float32], %w: Tensor[(70, 300), float32]) { nn.dense(%x, %w) }",
                    {{40, 300}, {70, 300}}, s);
  // A product of few columns as inner products or as panels (a classifier head;
  // the JIT passes the choice to the GEMM in its flags), and on a product the
  // inner products do not apply to (a matmul's B is not stored transposed).
  // The space offers the choice only where the inner products could run.
  auto narrowIn = [](const std::string& src) {
    return loop::scheduleSpaceOf(kernel_ir::lowerToLoops(test::fusedFrom(src), {.directConv = true, .gemmPostOps = true}))
        .hasNarrowGemm;
  };
  CHECK(narrowIn("def @main(%x: Tensor[(37, 300), float32], %w: Tensor[(10, 300), float32]) { nn.dense(%x, %w) }"));
  CHECK(narrowIn("def @main(%x: Tensor[(?, 300), float32], %w: Tensor[(?, 300), float32]) { nn.dense(%x, %w) }"));
  CHECK_FALSE(narrowIn("def @main(%x: Tensor[(37, 300), float32], %w: Tensor[(70, 300), float32]) { nn.dense(%x, %w) }"));
  CHECK_FALSE(narrowIn("def @main(%x: Tensor[(5, 70), float32], %w: Tensor[(70, 6), float32]) { nn.matmul(%x, %w) }"));
  // An LSTM step's gate loop after its one-row product: in the product's
  // threads (the default) or after it, the same results.
  const std::string gates =
      "def @main(%h: Tensor[(1, 64), float32], %w: Tensor[(256, 64), float32], %c: Tensor[(1, 64), float32]) {"
      "  let %s = split(nn.dense(%h, %w, units=256), indices_or_sections=4, axis=1);"
      "  let %c2 = sigmoid(%s.1) * %c + sigmoid(%s.0) * tanh(%s.2); (%c2, sigmoid(%s.3) * tanh(%c2)) }";
  CHECK(loop::scheduleSpaceOf(kernel_ir::lowerToLoops(test::fusedFrom(gates), {.directConv = true, .gemmPostOps = true}))
            .hasGemmThen);
  // A product with no loop after it: no such knob.
  CHECK_FALSE(loop::scheduleSpaceOf(
                  kernel_ir::lowerToLoops(test::fusedFrom("def @main(%x: Tensor[(1, 64), float32], %w: Tensor[(256, 64), "
                                                          "float32]) { nn.dense(%x, %w) }"),
                                          {.directConv = true, .gemmPostOps = true}))
                  .hasGemmThen);
  for (const char* s : {"then=after", "then=after,grain=-4", "grain=-4"})
    checkSameResult(gates, {{1, 64}, {256, 64}, {1, 64}}, s);
  for (const char* s : {"narrow=dot", "narrow=panels", "narrow=dot,parallel=0"}) {
    checkSameResult("def @main(%x: Tensor[(37, 300), float32], %w: Tensor[(10, 300), float32]) { nn.dense(%x, %w) }",
                    {{37, 300}, {10, 300}}, s);
    checkSameResult("def @main(%x: Tensor[(5, 70), float32], %w: Tensor[(70, 6), float32]) { nn.matmul(%x, %w) }",
                    {{5, 70}, {70, 6}}, s);
  }
  checkSameResult(
      "def @main(%x: Tensor[(1, 3, 20, 20), float32], %w: Tensor[(8, 3, 3, 3), float32]) { nn.conv2d(%x, %w, padding=[1, 1]) }",
      {{1, 3, 20, 20}, {8, 3, 3, 3}}, "conv=gemm,parallel=0");
  // Minimal filtering or the direct path (the knob exists for 3x3 filters of one
  // group at stride 1 or 2 only), the same results.
  const std::string conv3x3 =
      "def @main(%x: Tensor[(1, 16, 64, 64), float32], %w: Tensor[(16, 16, 3, 3), float32]) { nn.conv2d(%x, %w, padding=[1, 1]) }";
  auto winogradIn = [](const std::string& src) {
    return loop::scheduleSpaceOf(kernel_ir::lowerToLoops(test::fusedFrom(src), {.directConv = true, .gemmPostOps = true}))
        .hasWinogradConv;
  };
  CHECK(winogradIn(conv3x3));
  CHECK_FALSE(winogradIn("def @main(%x: Tensor[(1, 16, 64, 64), float32], %w: Tensor[(16, 16, 5, 5), float32]) {"
                         " nn.conv2d(%x, %w, padding=[2, 2]) }"));
  CHECK_FALSE(winogradIn("def @main(%x: Tensor[(1, 16, 64, 64), float32], %w: Tensor[(16, 16, 3, 3), float32]) {"
                         " nn.conv2d(%x, %w, strides=[3, 3]) }"));
  for (const char* s : {"winograd=0", "winograd=0,parallel=0", "grain=2"})
    checkSameResult(conv3x3, {{1, 16, 64, 64}, {16, 16, 3, 3}}, s);
  // 4x4 tiles (stride 1 only): the knob's third value; their results within
  // 1e-5 of the output's largest magnitude (tune/measure.cc).
  auto spaceOf = [](const std::string& src) {
    return loop::scheduleSpaceOf(kernel_ir::lowerToLoops(test::fusedFrom(src), {.directConv = true, .gemmPostOps = true}));
  };
  const std::string stride2 =
      "def @main(%x: Tensor[(1, 16, 64, 64), float32], %w: Tensor[(16, 16, 3, 3), float32]) { nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1]) }";
  CHECK(spaceOf(conv3x3).hasWinogradTiles4x4);
  CHECK(spaceOf(stride2).hasWinogradConv);
  CHECK_FALSE(spaceOf(stride2).hasWinogradTiles4x4);
  checkSameResult(conv3x3, {{1, 16, 64, 64}, {16, 16, 3, 3}}, "winograd=4");
  {  // and the compiled kernel does take them: its sums round apart from the default's 2x2 tiles'
    tune::MeasureOptions o;
    o.rounds = 1;
    o.roundMillis = 0.05;
    tune::Measurement m = tune::measureInProcess(test::fusedFrom(conv3x3), {{1, 16, 64, 64}, {16, 16, 3, 3}},
                                                 parsed("winograd=4"), o);
    CHECK(m.ok);
    CHECK(m.maxError > 0);
  }
  checkSameResult(conv3x3, {{1, 16, 64, 64}, {16, 16, 3, 3}}, "winograd=4,parallel=0");
  checkSameResult(stride2, {{1, 16, 64, 64}, {16, 16, 3, 3}}, "winograd=4");  // 2x2 tiles at stride 2
  // The filters a kernel prepares carry the form its schedule takes (loop::winogradForm).
  auto formOf = [](const std::string& src, const char* schedule) {
    loop::LoopKernel k = kernel_ir::lowerToLoops(test::fusedFrom(src), {.directConv = true, .gemmPostOps = true});
    loop::applySchedule(k, parsed(schedule));
    for (const auto& b : k.buffers)
      if (b.isPrepared() && b.preparedLayout == loop::PreparedLayout::ConvFilter)
        return b.preparedParam >> loop::kConvFilterWinogradShift;
    return int64_t(-1);
  };
  CHECK(formOf(conv3x3, "default") == 1);
  CHECK(formOf(conv3x3, "winograd=4") == loop::kWinogradF4);
  CHECK(formOf(conv3x3, "winograd=0") == 0);
  CHECK(formOf(stride2, "winograd=4") == 2);
}

TEST_CASE("a corrupted tuning log is an error naming its line") {
  std::string good = record("0123456789abcdef", "4x8;8", "parallel=0", 1.5);
  auto errorOf = [](const std::string& text) {
    try {
      jit::TuningLog::parse(text, "t.log");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(errorOf("# a comment\n" + good + "\n" + good) == "");
  CHECK(errorOf(good + "task=0123 shapes=4 schedule=default us=1 default_us=1 machine=m cpu=c\n").find("t.log:2:") !=
        std::string::npos);
  std::string bad = good;
  bad.replace(bad.find("parallel=0"), 10, "parallel=7");
  CHECK(errorOf("\n\n" + bad).find("t.log:3: bad value '7' for schedule key 'parallel'") != std::string::npos);
  CHECK(errorOf(good.substr(0, good.find(" cpu="))).find("t.log:1: missing field 'cpu'") != std::string::npos);
  CHECK(errorOf("task=0123456789abcdef shapes=4xq schedule=default us=1 default_us=1 machine=m cpu=c\n")
            .find("t.log:1: bad shapes '4xq'") != std::string::npos);
  CHECK(errorOf("garbage\n").find("t.log:1:") != std::string::npos);
}

TEST_CASE("records of another CPU are ignored with a note - the fastest record and the nearest shape win") {
  std::string text = record("0123456789abcdef", "1x64", "parallel=0", 3.0) +
                     record("0123456789abcdef", "1x64", "vec=8", 2.0) +  // faster: wins
                     record("0123456789abcdef", "256x64", "grain=4", 9.0) +
                     record("fedcba9876543210", "8", "unroll=2", 1.0, "x86_64|OtherVendor|f1m1s1|0|xcr0=0");
  jit::TuningLog log = jit::TuningLog::parse(text, "t.log");
  CHECK(log.size() == 2);
  REQUIRE(log.notes().size() == 1);
  CHECK(log.notes()[0].find("1 tuning record(s) measured on another CPU are ignored") != std::string::npos);
  CHECK(!log.hasTask("fedcba9876543210"));
  CHECK(!log.lookup("fedcba9876543210", std::vector<Shape>{{8}}).has_value());
  CHECK(log.lookup("0123456789abcdef", std::vector<Shape>{{1, 64}})->toString() == "vec=8");
  CHECK(log.lookup("0123456789abcdef", std::vector<Shape>{{2, 64}})->toString() == "vec=8");
  CHECK(log.lookup("0123456789abcdef", std::vector<Shape>{{100, 64}})->toString() == "grain=4");
  CHECK(!log.lookup("0123456789abcdef", std::vector<Shape>{{1, 64}, {3}}).has_value());  // other arity
}

TEST_CASE("a schedule slower in its program than the default is never applied, whatever other records say") {
  auto checked = [](std::string line, double programUs, double programDefaultUs) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " program_us=%g program_default_us=%g machine=", programUs, programDefaultUs);
    line.replace(line.find(" machine="), 9, buf);
    return line;
  };
  const std::string task = "0123456789abcdef";
  std::string fast = record(task, "1x64", "parallel=0", 1.0), slow = record(task, "1x64", "vec=8", 3.0);
  // The pair reads back as written, and goes together.
  jit::TuningLog one = jit::TuningLog::parse(checked(fast, 4.5, 4.0), "t.log");
  REQUIRE(one.size() == 1);
  CHECK(one.records()[0].programMicros == 4.5);
  CHECK(one.records()[0].programDefaultMicros == 4.0);
  CHECK(jit::TuningLog::format(one.records()[0]).find(" program_us=4.500 program_default_us=4.000 ") != std::string::npos);
  CHECK(jit::TuningLog::format(jit::TuningLog::parse(fast, "t.log").records()[0]).find("program") == std::string::npos);
  std::string half = checked(fast, 4.5, 4.0);
  half.erase(half.find(" program_default_us="), std::string(" program_default_us=4").size());
  try {
    jit::TuningLog::parse("\n" + half, "t.log");
    FAIL("a lone program_us was read");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("t.log:2: 'program_us' and 'program_default_us' go together") != std::string::npos);
  }

  // Lost in its program (4.5 us against the default's 4.0): these shapes keep
  // the default, and a neighbour's record does not stand in for it.
  std::string other = record(task, "2x64", "grain=4", 1.0);
  jit::TuningLog lost = jit::TuningLog::parse(fast + other + checked(fast, 4.5, 4.0), "t.log");
  CHECK(!lost.lookup(task, std::vector<Shape>{{1, 64}}).has_value());
  REQUIRE(lost.find(task, std::vector<Shape>{{1, 64}}) != nullptr);
  CHECK(lost.lostInProgram(*lost.find(task, std::vector<Shape>{{1, 64}})));
  CHECK(lost.lookup(task, std::vector<Shape>{{2, 64}})->toString() == "grain=4");
  CHECK(lost.lookup(task, std::vector<Shape>{{3, 64}})->toString() == "grain=4");  // the nearest that did not lose
  // ...the same schedule appended again stays lost; another schedule that did
  // not lose takes its place, though slower alone.
  CHECK(!jit::TuningLog::parse(checked(fast, 4.5, 4.0) + fast, "t.log").lookup(task, std::vector<Shape>{{1, 64}}));
  CHECK(jit::TuningLog::parse(checked(fast, 4.5, 4.0) + slow, "t.log").lookup(task, std::vector<Shape>{{1, 64}})->toString() ==
        "vec=8");
  CHECK(jit::TuningLog::parse(slow + checked(fast, 4.5, 4.0), "t.log").lookup(task, std::vector<Shape>{{1, 64}})->toString() ==
        "vec=8");
  // Faster in its program: applied; the latest check decides.
  CHECK(jit::TuningLog::parse(checked(fast, 3.0, 4.0), "t.log").lookup(task, std::vector<Shape>{{1, 64}})->toString() ==
        "parallel=0");
  CHECK(jit::TuningLog::parse(checked(fast, 4.5, 4.0) + checked(fast, 3.0, 4.0), "t.log")
            .lookup(task, std::vector<Shape>{{1, 64}})
            ->toString() == "parallel=0");
}

TEST_CASE("the JIT compiles a static kernel with its tuned schedule, and a ? kernel per nearest tuned shape") {
  auto f = test::fusedFrom("def @main(%x: Tensor[(48, 80), float32]) { sigmoid(%x) * 3f }");
  auto g = test::fusedFrom("def @main(%x: Tensor[(?, 80), float32]) { sigmoid(%x) * 5f }");
  std::string text = record(jit::taskKey(f), "48x80", "order=1:0,tile=16:16", 1) +
                     record(jit::taskKey(g), "4x80", "parallel=0", 1) + record(jit::taskKey(g), "1024x80", "grain=-2", 1);
  jit::KernelCache cache;
  auto untuned = cache.get(f);
  CHECK(untuned->schedule().isDefault());
  jit::KernelCache tunedCache;
  tunedCache.setTuningLog(std::make_shared<const jit::TuningLog>(jit::TuningLog::parse(text, "t.log")));
  auto tuned = tunedCache.get(f);
  CHECK(tuned->schedule().toString() == "order=1:0,tile=16:16");
  CHECK(tuned->key() != untuned->key());
  CHECK(tuned->key().find("|schedule=order=1:0,tile=16:16") != std::string::npos);
  CHECK(untuned->key().find("schedule") == std::string::npos);

  auto dyn = tunedCache.get(g);
  CHECK(dyn->schedule().isDefault());
  for (auto [rows, expected] : {std::pair{3, "parallel=0"}, std::pair{8, "parallel=0"}, std::pair{700, "grain=-2"}}) {
    Tensor x = Tensor::empty(DType::Float32, {rows, 80});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 17) * 0.1f;
    const Tensor* refs[] = {&x};
    const jit::CompiledKernel& v = dyn->variantFor(jit::CompiledKernel::TensorRefs(refs, 1));
    CHECK(v.schedule().toString() == expected);
    std::vector<Tensor> out = v(std::vector<Tensor>{x});
    std::vector<Tensor> ref = (*cache.get(g))(std::vector<Tensor>{x});
    CHECK(std::memcmp(out[0].data(), ref[0].data(), ref[0].nbytes()) == 0);
  }
}

TEST_CASE("tasks of a program with a loop over a list, recursion and ? shapes come with their recorded shapes") {
  // @map runs the dense layer on each list element (rows from the input's shape),
  // @halve recurses n times over a reduction, and a product reduction ends it.
  const std::string src = R"(
    def @layer(%x: Tensor[(?, 64), float32], %w: Tensor[(32, 64), float32]) -> Tensor[(?, 32), float32] {
      tanh(nn.dense(%x, %w))
    }
    def @halve(%n: int32, %acc: Tensor[(?, 32), float32]) -> Tensor[(?, 32), float32] {
      if (%n == 0) { %acc } else { @halve(%n - 1, %acc * 0.5f + mean(%acc, axis=[1], keepdims=True)) }
    }
    def @main(%a: Tensor[(?, 64), float32], %b: Tensor[(?, 64), float32], %w: Tensor[(32, 64), float32], %n: int32) {
      let %ys = @map(fn (%x: Tensor[(?, 64), float32]) { @layer(%x, %w) }, Cons(%a, Cons(%b, Cons(%a, Nil))));
      let %first = match? (%ys) { Cons(%y, _) => %y };
      prod(@halve(%n, %first), axis=[1])
    })";
  auto exe = compile(src, "tasks.relay");
  VirtualMachine vm(exe);
  vm.enableShapeRecording();
  auto filled = [](int64_t rows, int64_t cols) {
    Tensor t = Tensor::empty(DType::Float32, {rows, cols});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % 7) * 0.1f;
    return t;
  };
  vm.invoke("main", {Value(filled(3, 64)), Value(filled(5, 64)), Value(filled(32, 64)), Value::intScalar(DType::Int32, 4)});
  std::vector<tune::ShapeRecord> records;
  for (size_t k = 0; k < vm.kernelProfile().size(); ++k)
    for (const auto& [shapes, fig] : vm.kernelProfile()[k].byShape)
      records.push_back({exe->kernels()[k].function->name, jit::taskKey(*exe->kernels()[k].function),
                         *jit::parseShapes(shapes), fig.calls, static_cast<double>(fig.totalNanos) / 1e3});
  // Written and read back as vmrun --record-shapes and kiln-tune do.
  std::string path = tempPath("shapes.txt");
  {
    std::ofstream f(path);
    for (const auto& r : records) f << tune::formatShapeRecord(r) << "\n";
  }
  tune::ExtractOptions options;
  options.records = tune::readShapeRecords(path);
  std::filesystem::remove(path);
  tune::TaskList list = tune::extractTasks(*exe, options);
  INFO(list.toString());
  auto find = [&](const std::string& op, const std::string& shapes) -> const tune::Task* {
    for (const tune::Task& t : list.tasks)
      if (t.ops.find(op) != std::string::npos && jit::formatShapes(t.shapes) == shapes) return &t;
    return nullptr;
  };
  const tune::Task* dense3 = find("nn.dense", "3x64;32x64");
  const tune::Task* dense5 = find("nn.dense", "5x64;32x64");
  REQUIRE(dense3);
  REQUIRE(dense5);
  CHECK(dense3->calls == 2);  // %a twice in the list
  CHECK(dense5->calls == 1);
  CHECK(dense3->dynamic);
  CHECK(dense3->weight > 0);
  const tune::Task* mean = find("mean", "3x32");
  REQUIRE(mean);
  CHECK(mean->calls == 4);  // once per recursion step
  REQUIRE(find("prod", "3x32"));
  CHECK(find("prod", "3x32")->calls == 1);
  CHECK(list.unresolved.empty());
  // Without the record, the `?` kernels are unresolved unless a range is given.
  tune::TaskList bare = tune::extractTasks(*exe, {});
  CHECK(!bare.unresolved.empty());
  tune::ExtractOptions ranged;
  ranged.minDim = 2;
  ranged.maxDim = 8;
  tune::TaskList range = tune::extractTasks(*exe, ranged);
  bool sawDense2 = false, sawDense8 = false;
  for (const tune::Task& t : range.tasks) {
    sawDense2 |= t.ops.find("nn.dense") != std::string::npos && jit::formatShapes(t.shapes) == "2x64;32x64";
    sawDense8 |= t.ops.find("nn.dense") != std::string::npos && jit::formatShapes(t.shapes) == "8x64;32x64";
  }
  CHECK(sawDense2);
  CHECK(sawDense8);
}

TEST_CASE("small element-wise kernels and reshapes are left out, with the reason") {
  auto exe = compile(R"(
    def @main(%x: Tensor[(4, 4), float32], %y: Tensor[(256, 256), float32], %z: Tensor[(?, 8), float32]) {
      (reshape(%x, newshape=[16]), %x + 1f, %y * 2f, shape_of(%z))
    })",
                     "left_out.relay");
  tune::TaskList list = tune::extractTasks(*exe, {});
  INFO(list.toString());
  REQUIRE(list.tasks.size() == 1);
  CHECK(jit::formatShapes(list.tasks[0].shapes) == "256x256");
  CHECK(list.toString().find("tiny element-wise") != std::string::npos);
  CHECK(list.unresolved.empty());  // shape_of of a ? tensor reads no data: not a task at all
}

#ifdef KILN_TUNE_PATH
TEST_CASE("a task's floor: its FLOPs counted low, its operands and results once, against the machine's limits") {
  // A product: 2 m n k; bytes: x, w and the result once.
  tune::WorkBound dense = tune::workBound(
      test::fusedFrom("def @main(%x: Tensor[(40, 300), float32], %w: Tensor[(70, 300), float32]) { nn.dense(%x, %w) }"),
      {{40, 300}, {70, 300}});
  CHECK(dense.flops == 2.0 * 40 * 70 * 300);
  CHECK(dense.bytes == 4.0 * (40 * 300 + 70 * 300 + 40 * 70));
  CHECK(dense.outputBytes == 4.0 * 40 * 70);
  // A convolution: 2 x outputs x (input channels x 3 x 3), plus its bias and ReLU.
  tune::WorkBound conv = tune::workBound(
      test::fusedFrom("def @main(%x: Tensor[(1, 3, 20, 20), float32], %w: Tensor[(8, 3, 3, 3), float32], %b: Tensor[(8,), float32]) "
                      "{ nn.relu(nn.bias_add(nn.conv2d(%x, %w, padding=[1, 1]), %b)) }"),
      {{1, 3, 20, 20}, {8, 3, 3, 3}, {8}});
  CHECK(conv.flops == 2.0 * 8 * 400 * 27 + 2 * 8 * 400);
  CHECK(conv.bytes == 4.0 * (1200 + 216 + 8 + 3200));
  // One that minimal filtering may take (3x3 filters, 16 or more channels, 8 or
  // more filters, stride 1 or 2): its fewest products, 36 a 4x4 output tile and
  // channel pair at stride 1 (against the direct form's 144), 25 a 2x2 tile at
  // stride 2 (against 36).
  const char* winograd = "def @main(%x: Tensor[(1, 16, 20, 20), float32], %w: Tensor[(8, 16, 3, 3), float32]) "
                         "{ nn.conv2d(%x, %w, strides=[STRIDE, STRIDE], padding=[1, 1]) }";
  auto withStride = [&](const char* stride) {
    std::string src = winograd;
    src.replace(src.find("STRIDE"), 6, stride);
    src.replace(src.find("STRIDE"), 6, stride);
    return test::fusedFrom(src);
  };
  CHECK(tune::workBound(withStride("1"), {{1, 16, 20, 20}, {8, 16, 3, 3}}).flops ==
        doctest::Approx(2.0 * 8 * 400 * 16 * 9 * 36 / 144));
  CHECK(tune::workBound(withStride("2"), {{1, 16, 20, 20}, {8, 16, 3, 3}}).flops ==
        doctest::Approx(2.0 * 8 * 100 * 16 * 9 * 25 / 36));
  CHECK(tune::workBound(withStride("3"), {{1, 16, 20, 20}, {8, 16, 3, 3}}).flops == 2.0 * 8 * 49 * 16 * 9);
  // Element-wise: one operation an element each; a reduction: one an input
  // element; data movement: none. A `?` kernel at its concrete shapes.
  CHECK(tune::workBound(test::fusedFrom("def @main(%x: Tensor[(?, 20), float32]) { tanh(%x) * %x }"), {{33, 20}}).flops ==
        2 * 660);
  CHECK(tune::workBound(test::fusedFrom("def @main(%x: Tensor[(33, 20), float32]) { prod(%x, axis=[1]) }"), {{33, 20}}).flops ==
        660);
  tune::WorkBound moved = tune::workBound(test::fusedFrom("def @main(%x: Tensor[(33, 20), float32]) { transpose(%x) }"), {{33, 20}});
  CHECK(moved.flops == 0);
  CHECK(moved.bytes == 2 * 4.0 * 660);
  // Shapes the kernel does not take: an error, as for the kernel itself.
  CHECK_THROWS_AS(tune::workBound(test::fusedFrom("def @main(%x: Tensor[(33, 20), float32]) { tanh(%x) }"), {{34, 20}}),
                  Error);

  // The machine: a peak in the range of real cores, a read that takes some time;
  // the floor is the larger of the two bounds and says which.
  tune::MachineFloor machine = tune::MachineFloor::measure(1);
  CHECK(machine.peakFlopsPerCore > 1e8);
  CHECK(machine.peakFlopsPerCore < 1e13);
  tune::MachineFloor::Floor read = machine.floorOf({0, 1 << 20});
  CHECK(std::string(read.what) == "bytes read");
  CHECK(read.micros > 0);
  CHECK(read.micros < 1e5);
  // Results are written, not read: a kernel that only writes has a write floor.
  tune::MachineFloor::Floor written = machine.floorOf({0, 1 << 20, 1 << 20});
  CHECK(std::string(written.what) == "bytes written");
  CHECK(written.micros > 0);
  CHECK(written.micros < 1e5);
  // A kernel that reads and writes: no less than either alone, and at least the
  // loop that does both (on machines where they do not overlap, about their sum).
  tune::MachineFloor::Floor both = machine.floorOf({0, 3 << 20, 1 << 20});
  CHECK(both.micros >= read.micros * 0.5);  // 2 MiB read against the 1 MiB above, timed apart
  double together = device::readWriteSeconds(2 << 20, 1 << 20, 1, 5) * 1e6;
  CHECK(together > 0);
  CHECK(together >= device::readSeconds(2 << 20, 1, 5) * 1e6 * 0.5);
  CHECK(device::readWriteSeconds(0, 1 << 20, 1, 3) > 0);
  CHECK(device::readWriteSeconds(1 << 20, 0, 1, 3) > 0);
  CHECK(device::readWriteSeconds(0, 0, 2, 3) == 0);
  tune::MachineFloor::Floor compute = machine.floorOf({1e12, 64});
  CHECK(std::string(compute.what) == "FLOPs at peak");
  CHECK(compute.micros == doctest::Approx(1e12 / machine.peakFlopsPerCore * 1e6));
  CHECK(device::readSeconds(0, 2) == 0);
  CHECK(device::readSeconds(4096, 2, 3) > 0);
  CHECK(device::writeSeconds(0, 2) == 0);
  CHECK(device::writeSeconds(4096, 2, 3) > 0);
  // 40 bytes: one thread writes the one whole line there is.
  CHECK(device::writeSeconds(40, 2, 3) > 0);
}

TEST_CASE("a small buffer's floor is its time per pass over many passes, not one pass and the clock reads around it") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Instrumented, a pass's own calls cost more than its few hundred bytes'
  // reads (a 1 KiB read and write took 424 ns a pass under ASan), which is
  // what the loops' time then measures.
  test::skip("a sanitizer build times its instrumentation, not the loops");
  return;
#endif
  // Per byte, 1 KiB (in L1) reads and writes no slower than 64 KiB does, within
  // a shared host's swings. Each side's fastest of three stretches, as a floor
  // is: a single stretch, preempted by a parallel test's threads, failed once under ctest -j2.
  const int reps = 5;
  auto fastest = [](auto time) {
    double best = time();
    for (int i = 0; i < 2; ++i) best = std::min(best, time());
    return best;
  };
  CHECK(fastest([&] { return device::readSeconds(1024, 1, reps); }) * 64 <
        fastest([&] { return device::readSeconds(65536, 1, reps); }) * 3);
  CHECK(fastest([&] { return device::writeSeconds(1024, 1, reps); }) * 64 <
        fastest([&] { return device::writeSeconds(65536, 1, reps); }) * 3);
  CHECK(fastest([&] { return device::readWriteSeconds(512, 512, 1, reps); }) * 64 <
        fastest([&] { return device::readWriteSeconds(32768, 32768, 1, reps); }) * 3);
}

TEST_CASE("timed FMAs: each run does its FLOPs at no more than the peak, split over the threads asked for") {
  double peak = device::fp32PeakPerCore(5, 2'000'000);
  REQUIRE(peak > 0);
  const double flops = 4e8;
  std::vector<double> one = device::timedFmas(flops, 1, 4), two = device::timedFmas(flops, 2, 4);
  REQUIRE(one.size() == 4);
  REQUIRE(two.size() == 4);
  // No run beats the peak by more than a shared host's swings (its speed
  // changes twofold between stretches): the work is done, not optimized away (all
  // of it on one thread, half on each of two).
  for (double s : one) CHECK(s >= flops / (peak * 4));
  for (double s : two) CHECK(s >= flops / 2 / (peak * 4));
  for (double s : one) CHECK(s < 60.0);
  CHECK(device::timedFmas(0, 2, 3) == std::vector<double>(3, 0.0));
  CHECK(device::timedFmas(1e6, 1, 0).empty());
}

TEST_CASE("a prod reduction tunes, and the log it writes is read back and applied") {
  auto exe = compile("def @main(%x: Tensor[(64, 300), float32]) { prod(%x * 0.01f + 1f, axis=[1]) }", "prod.relay");
  tune::TaskList list = tune::extractTasks(*exe, {});
  REQUIRE(list.tasks.size() == 1);
  CHECK(list.tasks[0].ops.find("prod") != std::string::npos);
  std::string exePath = tempPath("prod.kx"), logPath = tempPath("prod.log");
  exe->save(exePath);
  tune::TuneOptions o;
  o.worker = KILN_TUNE_PATH;
  o.exePath = exePath;
  o.logPath = logPath;
  o.maxTrials = 3;
  o.measure.rounds = 2;
  o.measure.roundMillis = 0.2;
  std::vector<tune::TaskResult> results = tune::tuneTasks(*exe, list, o);
  REQUIRE(results.size() == 1);
  CHECK(results[0].trials == 3);
  CHECK(results[0].failed == 0);
  CHECK(results[0].micros > 0);
  CHECK(results[0].micros <= results[0].defaultMicros);  // never slower: the default is recorded otherwise
  // The room is read against the default's fastest measurement of the search
  // (a slow stretch of the host raises one measurement, not the floor).
  CHECK(results[0].fastestDefaultMicros > 0);
  CHECK(results[0].fastestDefaultMicros <= results[0].defaultMicros);
  CHECK(results[0].floorMicros > 0);
  CHECK(results[0].room() == doctest::Approx(results[0].fastestDefaultMicros / results[0].floorMicros));
  jit::TuningLog log = jit::TuningLog::load(logPath);
  CHECK(log.size() == 1);
  CHECK(log.find(list.tasks[0].task, list.tasks[0].shapes) != nullptr);
  // A second run resumes: nothing measured again.
  std::vector<tune::TaskResult> again = tune::tuneTasks(*exe, list, o);
  REQUIRE(again.size() == 1);
  CHECK(again[0].resumed);
  CHECK(again[0].fastestDefaultMicros == 0);  // nothing measured: the log's default time stands
  CHECK(jit::TuningLog::load(logPath).size() == 1);
  std::filesystem::remove(exePath);
  std::filesystem::remove(logPath);
}

TEST_CASE("a worker that crashes, hangs or fails is a failed measurement, not the tuner's end") {
  std::string script = tempPath("worker.sh");
  auto worker = [&](const std::string& body) {
    std::ofstream f(script);
    f << "#!/bin/sh\n" << body << "\n";
    f.close();
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  };
  tune::MeasureOptions o;
  worker("kill -SEGV $$");
  tune::Measurement crash = tune::measureInWorker(script, "x.kx", 0, {{4}}, Schedule{}, o, 30);
  CHECK(!crash.ok);
  CHECK(crash.error.find("crashed (signal 11") != std::string::npos);
  worker("sleep 30");
  tune::Measurement hang = tune::measureInWorker(script, "x.kx", 0, {{4}}, Schedule{}, o, 0.5);
  CHECK(!hang.ok);
  CHECK(hang.error.find("timed out") != std::string::npos);
  std::filesystem::remove(script);
  // The real worker on a file that is no executable: its error comes back.
  tune::Measurement missing = tune::measureInWorker(KILN_TUNE_PATH, tempPath("missing.kx"), 0, {{4}}, Schedule{}, o, 30);
  CHECK(!missing.ok);
  CHECK(!missing.error.empty());
}
#endif

TEST_CASE("streaming stores write around the caches only outputs the kernel never reads, with the same results") {
  const std::string chain = "def @main(%x: Tensor[(?, ?), float32], %y: Tensor[(?, ?), float32]) { sigmoid(%x * %y + 1f) * %x - %y }";
  auto spaceOf = [](const std::string& src) {
    return loop::scheduleSpaceOf(kernel_ir::lowerToLoops(test::fusedFrom(src), {.directConv = true, .gemmPostOps = true}));
  };
  CHECK(spaceOf(chain).hasVectorStores);
  CHECK_FALSE(
      spaceOf("def @main(%x: Tensor[(40, 300), float32], %w: Tensor[(70, 300), float32]) { nn.dense(%x, %w) }")
          .hasVectorStores);  // a GEMM stores its own way
  CHECK(parsed("stores=stream").streamingStores);
  CHECK(parsed("stores=stream").toString() == "stores=stream");
  CHECK(parsed("stores=cached").isDefault());

  // The optimized IR: guarded non-temporal vector stores and a fence before returning.
  jit::CompiledKernel streamed(test::fusedFrom(chain), Device{}, true, nullptr, {}, parsed("stores=stream"));
  CHECK(streamed.optimizedIR().find("!nontemporal") != std::string::npos);
  CHECK(streamed.optimizedIR().find("@llvm.x86.sse.sfence") != std::string::npos);
  jit::CompiledKernel cached(test::fusedFrom(chain), Device{}, true);
  CHECK(cached.optimizedIR().find("!nontemporal") == std::string::npos);
  // Results bit for bit the default's, at shapes whose rows and parallel pieces
  // start off a vector's alignment (the guarded stores' other path) and on it.
  for (Shape shape : {Shape{1, 5}, Shape{37, 100}, Shape{3, 4096}, Shape{257, 1031}}) {
    Tensor x = Tensor::empty(DType::Float32, shape), y = Tensor::empty(DType::Float32, shape);
    for (int64_t i = 0; i < x.numel(); ++i) {
      x.data<float>()[i] = static_cast<float>(i % 23) * 0.07f - 0.5f;
      y.data<float>()[i] = static_cast<float>(i % 11) * 0.11f;
    }
    std::vector<Tensor> a = streamed(std::vector<Tensor>{x, y});
    std::vector<Tensor> b = cached(std::vector<Tensor>{x, y});
    INFO(shape[0], "x", shape[1]);
    REQUIRE(a[0].nbytes() == b[0].nbytes());
    CHECK(std::memcmp(a[0].data(), b[0].data(), b[0].nbytes()) == 0);
  }
  // A softmax by default stores exp(x - max) and scales it in place, so its
  // output is read back and stays cached; under stores=stream it is lowered
  // write-only (exp computed for the sum, then again for the result), and then
  // its stores stream.
  const std::string softmaxSrc = "def @main(%x: Tensor[(8, 512), float32]) { nn.softmax(%x, axis=-1) }";
  std::string writeOnly = kernel_ir::lowerToLoops(test::fusedFrom(softmaxSrc), {.outputsWriteOnly = true}).toString();
  CHECK(writeOnly.find("= out0[") == std::string::npos);
  CHECK(writeOnly.find("* out0[") == std::string::npos);
  CHECK(writeOnly.find("mul(out0[") == std::string::npos);
  CHECK(kernel_ir::lowerToLoops(test::fusedFrom(softmaxSrc)).toString().find("mul(out0[") != std::string::npos);
  jit::CompiledKernel softmax(test::fusedFrom(softmaxSrc), Device{}, true, nullptr, {}, parsed("stores=stream"));
  CHECK(softmax.optimizedIR().find("!nontemporal") != std::string::npos);
  jit::CompiledKernel softmaxCached(test::fusedFrom(softmaxSrc), Device{}, true);
  CHECK(softmaxCached.optimizedIR().find("!nontemporal") == std::string::npos);
  checkSameResult("def @main(%x: Tensor[(70, 130), float32]) { nn.softmax(%x, axis=-1) }", {{70, 130}}, "stores=stream");
  checkSameResult("def @main(%x: Tensor[(?, ?), float32]) { nn.softmax(%x, axis=-1) }", {{5, 4099}}, "stores=stream");
  // Rows with a NaN, a +inf or only -inf, and a row whose exponentials reach the
  // denormals: the write-only form gives the default's results (NaN where it does).
  {
    const std::string dynSrc = "def @main(%x: Tensor[(?, ?), float32]) { nn.softmax(%x, axis=-1) }";
    jit::CompiledKernel streamedDyn(test::fusedFrom(dynSrc), Device{}, false, nullptr, {}, parsed("stores=stream"));
    jit::CompiledKernel cachedDyn(test::fusedFrom(dynSrc), Device{}, false);
    const int64_t rows = 4, cols = 300;
    Tensor x = Tensor::empty(DType::Float32, {rows, cols});
    for (int64_t c = 0; c < cols; ++c) {
      x.data<float>()[c] = -static_cast<float>(c) * 0.35f;  // down to -104.65
      x.data<float>()[cols + c] = c == 3 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      x.data<float>()[2 * cols + c] = c == 4 ? std::numeric_limits<float>::infinity() : 0.0f;
      x.data<float>()[3 * cols + c] = -std::numeric_limits<float>::infinity();
    }
    Tensor a = streamedDyn(std::vector<Tensor>{x})[0], b = cachedDyn(std::vector<Tensor>{x})[0];
    int nans = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t row = i / cols, col = i % cols;
      INFO(row, " ", col);
      float u = a.data<float>()[i], v = b.data<float>()[i];
      CHECK(std::isnan(u) == std::isnan(v));
      if (std::isnan(v)) ++nans;
      else CHECK(std::fabs(u - v) <= 1e-6f * v + 2 * std::numeric_limits<float>::denorm_min());
    }
    CHECK(nans == 3 * cols);  // the last three rows
    CHECK(a.data<float>()[0] == doctest::Approx(1.0 - std::exp(-0.35)).epsilon(1e-5));
  }
  checkSameResult(chain, {{33, 517}, {33, 517}}, "stores=stream,vec=8,interleave=2");
}

TEST_CASE("a schedule's grain reaches the runtime's GEMMs: a product under the default grain shares at a finer one") {
  device::ThreadPool pool(2);
  device::ThreadPoolScope scope(&pool);
  // 8 x 128 by 128 x 96: the few-rows product's work estimate (m n k / 4 =
  // 24576) is under kMinParallelWork, so by default it runs on its caller.
  const std::string src = "def @main(%x: Tensor[(8, 128), float32], %w: Tensor[(128, 96), float32]) { nn.matmul(%x, %w) }";
  jit::CompiledKernel plain(test::fusedFrom(src), Device{}, false);
  jit::CompiledKernel fine(test::fusedFrom(src), Device{}, false, nullptr, {}, parsed("grain=-2"));
  Tensor x = Tensor::empty(DType::Float32, {8, 128}), w = Tensor::empty(DType::Float32, {128, 96});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>(i % 7) * 0.05f - 0.15f;
  int64_t before = pool.stats().shared;
  std::vector<Tensor> a = plain(std::vector<Tensor>{x, w});
  CHECK(pool.stats().shared == before);
  std::vector<Tensor> b = fine(std::vector<Tensor>{x, w});
  CHECK(pool.stats().shared == before + 1);
  CHECK(std::memcmp(a[0].data(), b[0].data(), a[0].nbytes()) == 0);  // each output column's sum is the same either way

  // The scope itself: a coarser grain keeps a loop the default would share on its caller.
  auto noop = [](void* const*, const int64_t*, int64_t, int64_t) {};
  before = pool.stats().shared;
  {
    device::GrainScope coarse(3);
    pool.parallelFor(4, 4 * device::kMinParallelWork, noop, nullptr, nullptr);
  }
  CHECK(pool.stats().shared == before);
  pool.parallelFor(4, 4 * device::kMinParallelWork, noop, nullptr, nullptr);
  CHECK(pool.stats().shared == before + 1);
  CHECK(device::grainFromFlags(device::grainFlags(-10) | 7) == -10);
  CHECK(device::grainFromFlags(device::grainFlags(20)) == 20);
}
