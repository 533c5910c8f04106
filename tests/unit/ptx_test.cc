// The GPU code generator without a GPU: every operator's kernel (each in
// float32, element-wise ones also in float64 and float16, arithmetic also in
// int32) is generated as PTX for sm_90 and checked with the CUDA toolkit's
// ptxas. Skipped, with a message, where ptxas is absent.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "compiler/passes/fuse_ops.h"
#include "compiler/passes/to_fused_function.h"
#include "compiler/pipeline.h"
#include "kernel_ir/lower.h"
#include "ops/registry.h"
#include "codegen/nvptx_codegen.h"
#include "kernel_ir/op.h"
#include "kernel_ir/kernel_kind.h"
#include "operator_programs.h"

namespace {

std::string ptxas() {
  if (const char* p = std::getenv("KILN_PTXAS"); p && *p) return p;
#ifdef KILN_PTXAS_PATH
  return KILN_PTXAS_PATH;
#else
  return "";
#endif
}

}  // namespace

TEST_CASE("ptx: every operator's kernel is PTX for sm_90 that ptxas accepts") {
  if (!std::ifstream(kiln::jit::libdevicePath()).good()) {
    MESSAGE("libdevice not found (no CUDA toolkit; set KILN_LIBDEVICE): PTX generation not checked");
    return;
  }
  std::string tool = ptxas();
  bool check = !tool.empty() && std::ifstream(tool).good();
  if (!check) MESSAGE("ptxas not found (set KILN_PTXAS): PTX is generated but not assembled");
  std::set<std::string> covered;
  std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  int kernels = 0;
  for (const std::string& src : kiln_test::operatorPrograms()) {
    CAPTURE(src);
    kiln::CompileOptions o;
    o.fuse = false;  // one kernel per operator
    auto stages = kiln::compiler::runPasses(src, "ptx.relay", o);
    for (const kiln::ir::Function* fn : kiln::compiler::primitiveFunctions(*stages.fused)) {
      kiln::kernel_ir::FusedFunction f = kiln::compiler::toFusedFunction(fn, "k", "ptx.relay");
      for (const auto& n : f.nodes)
        if (!n.isConstant()) covered.insert(n.op->name);
      if (kiln::kernel_ir::isDynamicKernel(f)) continue;
      kiln::jit::PtxModule ptx = kiln::jit::emitPtx(kiln::kernel_ir::lowerToLoops(f), "k");
      CHECK(ptx.sm == 90);
      REQUIRE(!ptx.launches.empty());
      CHECK(ptx.ptx.find(".target sm_90") != std::string::npos);
      for (const auto& l : ptx.launches) CHECK(ptx.ptx.find(".entry " + l.entry) != std::string::npos);
      ++kernels;
      if (!check) continue;
      std::string file = dir + "/kiln_ptx_test_" + std::to_string(::getpid()) + ".ptx";
      std::ofstream(file) << ptx.ptx;
      std::string cmd = "'" + tool + "' -arch=sm_90 '" + file + "' -o /dev/null 2>&1";
      FILE* p = ::popen(cmd.c_str(), "r");
      REQUIRE(p);
      std::string errors;
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) errors += buf;
      int status = ::pclose(p);
      CAPTURE(errors);
      CHECK(status == 0);
      std::remove(file.c_str());
    }
  }
  std::vector<std::string> missing;
  for (const auto* op : kiln::ops::allOps())
    if (!kiln_test::kHostOnly.count(op->name) && !covered.count(op->name)) missing.push_back(op->name);
  CAPTURE(missing);
  CHECK(missing.empty());
  CHECK(kernels > 150);
}

namespace {

// The PTX module of the first kernel of `src` (fused as a user's program is).
kiln::jit::PtxModule ptxOf(const std::string& src, kiln::loop::LoopKernel* loops = nullptr) {
  auto stages = kiln::compiler::runPasses(src, "ptx.relay", kiln::CompileOptions{});
  auto fns = kiln::compiler::primitiveFunctions(*stages.fused);
  REQUIRE(!fns.empty());
  kiln::kernel_ir::FusedFunction f = kiln::compiler::toFusedFunction(fns.front(), "k", "ptx.relay");
  kiln::loop::LoopKernel k = kiln::kernel_ir::lowerToLoops(f);
  kiln::jit::PtxModule m = kiln::jit::emitPtx(k, "k");
  // A disk-cache hit rebuilds the plan without code generation: it must match.
  kiln::jit::PtxModule plan = kiln::jit::planPtx(k, "k");
  REQUIRE(plan.launches.size() == m.launches.size());
  for (size_t i = 0; i < m.launches.size(); ++i) {
    CHECK(plan.launches[i].entry == m.launches[i].entry);
    CHECK(plan.launches[i].mapping == m.launches[i].mapping);
    CHECK(plan.launches[i].blockThreads == m.launches[i].blockThreads);
  }
  if (loops) *loops = std::move(k);
  return m;
}

std::vector<kiln::jit::GpuMapping> mappings(const kiln::jit::PtxModule& m) {
  std::vector<kiln::jit::GpuMapping> out;
  for (const auto& l : m.launches) out.push_back(l.mapping);
  return out;
}

}  // namespace

TEST_CASE("ptx: launches are mapped by what the kernel does") {
  if (!std::ifstream(kiln::jit::libdevicePath()).good()) {
    MESSAGE("libdevice not found: GPU mappings not checked");
    return;
  }
  using kiln::jit::GpuMapping;
  SUBCASE("an element-wise nest is one flat, coalesced index") {
    auto m = ptxOf("def @main(%x: Tensor[(?, 64, 32), float32]) { exp(%x) + 1f }");
    REQUIRE(mappings(m) == std::vector{GpuMapping::Flat});
    CHECK(m.launches[0].loopVars.size() == 3);
    CHECK(m.launches[0].blockThreads == 256);
  }
  SUBCASE("a long row reduction runs a block per row with shuffles and shared memory") {
    auto m = ptxOf("def @main(%x: Tensor[(?, 4096), float32]) { nn.softmax(%x) }");
    REQUIRE(mappings(m) == std::vector{GpuMapping::Rows});
    CHECK(m.ptx.find("shfl.sync.bfly.b32") != std::string::npos);
    CHECK(m.ptx.find("bar.sync") != std::string::npos);
    CHECK(m.ptx.find(".shared") != std::string::npos);
  }
  SUBCASE("a row's statistics run once per row: rows are only the loops the reductions read") {
    // layer_norm and log_softmax compute each element from its row's mean or
    // maximum: the element loop is shared out inside the row, not a row itself
    // (that made every element reduce its whole row again).
    for (const char* op : {"nn.layer_norm(%x, %g, %b)", "nn.log_softmax(%x)"}) {
      CAPTURE(op);
      auto m = ptxOf(std::string("def @main(%x: Tensor[(?, 4096), float32], %g: Tensor[(4096), float32], %b: Tensor[(4096), float32]) { ") +
                     op + " }");
      REQUIRE(mappings(m) == std::vector{GpuMapping::Rows});
      CHECK(m.launches[0].loopVars.size() == 1);
    }
    // A scan's reduction reads the element's position: every element is a row.
    auto m = ptxOf("def @main(%x: Tensor[(?, 4096), float32]) { cumsum(%x, axis=1) }");
    REQUIRE(mappings(m) == std::vector{GpuMapping::Rows});
    CHECK(m.launches[0].loopVars.size() == 2);
  }
  SUBCASE("a whole-tensor reduction is one row of a block") {
    auto m = ptxOf("def @main(%x: Tensor[(8, 100), float64]) { sum(%x) }");
    REQUIRE(mappings(m) == std::vector{GpuMapping::Rows});
    CHECK(m.launches[0].loopVars.empty());
  }
  SUBCASE("a short reduction stays in each thread") {
    auto m = ptxOf("def @main(%x: Tensor[(1000, 8), float32]) { max(%x, axis=[1]) }");
    CHECK(mappings(m) == std::vector{GpuMapping::Flat});
  }
  SUBCASE("arg reductions are never split") {
    auto m = ptxOf("def @main(%x: Tensor[(4, 4096), float32]) { argmax(%x, axis=[1]) }");
    CHECK(mappings(m) == std::vector{GpuMapping::Flat});
  }
  SUBCASE("dense is a tiled product, its epilogue flat") {
    auto m = ptxOf("def @main(%x: Tensor[(?, 256), float32], %w: Tensor[(128, 256), float32], %b: Tensor[(128), float32]) {"
                   " nn.relu(nn.bias_add(nn.dense(%x, %w), %b)) }");
    REQUIRE(mappings(m) == (std::vector{GpuMapping::Gemm, GpuMapping::Flat}));
    CHECK(m.launches[0].batchVar < 0);
    CHECK(m.ptx.find("kiln_tile_a[4096]") != std::string::npos);
    CHECK(m.ptx.find("kiln_tile_b[4096]") != std::string::npos);
  }
  SUBCASE("batch_matmul puts the batch in grid z") {
    auto m = ptxOf("def @main(%x: Tensor[(?, 64, 32), float32], %w: Tensor[(?, 48, 32), float32]) { nn.batch_matmul(%x, %w) }");
    REQUIRE(mappings(m) == std::vector{GpuMapping::Gemm});
    CHECK(m.launches[0].batchVar >= 0);
    CHECK(m.ptx.find("%ctaid.z") != std::string::npos);
  }
  SUBCASE("conv2d loops over images and groups on the host: unfold, then a tiled product") {
    auto m = ptxOf("def @main(%x: Tensor[(2, 4, 8, 8), float32], %w: Tensor[(4, 2, 3, 3), float32]) {"
                   " nn.conv2d(%x, %w, padding=[1, 1], groups=2) }");
    REQUIRE(m.steps.size() == 1);
    CHECK(m.steps[0].kind == kiln::jit::PtxStep::Kind::Loop);
    CHECK(m.hostVars.size() == 2);
    REQUIRE(m.steps[0].body.size() == 1);
    const auto& inner = m.steps[0].body[0];
    CHECK(inner.kind == kiln::jit::PtxStep::Kind::Loop);
    REQUIRE(inner.body.size() == 2);
    CHECK(m.launches[static_cast<size_t>(inner.body[0].launch)].mapping == GpuMapping::Flat);
    CHECK(m.launches[static_cast<size_t>(inner.body[1].launch)].mapping == GpuMapping::Gemm);
  }
}

TEST_CASE("ptx: the host computes launch extents as the kernel would") {
  if (!std::ifstream(kiln::jit::libdevicePath()).good()) return;
  kiln::loop::LoopKernel k;
  auto m = ptxOf("def @main(%x: Tensor[(?, 3, ?), float32]) { exp(%x) }", &k);
  REQUIRE(m.launches.size() == 1);
  const auto& l = m.launches[0];
  REQUIRE(l.extents.size() == 3);
  std::vector<int64_t> shapes(static_cast<size_t>(std::max(k.numShapeSlots, 1)), 0);
  // The kernel's run-time dimensions: the input's, shared with the output's.
  for (size_t i = 0; i < shapes.size(); ++i) shapes[i] = 5 + static_cast<int64_t>(i);
  int64_t work = 1;
  for (auto e : l.extents) {
    auto v = kiln::loop::evalOnHost(k, e, shapes.data(), {});
    REQUIRE(v);
    work *= *v;
  }
  CHECK(work % 3 == 0);
  CHECK(work > 3 * 25 - 1);

  // Integer semantics: floor division and modulo, the never-trapping division, wrap-around.
  kiln::loop::LoopKernel t;
  kiln::loop::LoopBuilder b(t);
  using kiln::loop::BinaryOp;
  auto c = [&](int64_t v) { return b.intConst(v); };
  std::unordered_map<int32_t, int64_t> none;
  CHECK(*kiln::loop::evalOnHost(t, b.binary(BinaryOp::FloorDiv, c(-7), c(2)), nullptr, none) == -4);
  CHECK(*kiln::loop::evalOnHost(t, b.binary(BinaryOp::Div, c(-7), c(2)), nullptr, none) == -3);
  CHECK(*kiln::loop::evalOnHost(t, b.binary(BinaryOp::FloorMod, c(-7), c(3)), nullptr, none) == 2);
  CHECK(*kiln::loop::evalOnHost(t, b.binary(BinaryOp::Div, c(7), c(0)), nullptr, none) == 0);
  CHECK(*kiln::loop::evalOnHost(t, b.binary(BinaryOp::Mod, c(7), c(0)), nullptr, none) == 0);
  CHECK(*kiln::loop::evalOnHost(t, b.binary(BinaryOp::Lt, c(2), c(3)), nullptr, none) == 1);
  int32_t v = b.newVar();
  auto withVar = b.add(b.var(v), c(10));
  CHECK(!kiln::loop::evalOnHost(t, withVar, nullptr, none));
  CHECK(*kiln::loop::evalOnHost(t, withVar, nullptr, {{v, 5}}) == 15);
  CHECK(!kiln::loop::hostEvaluable(t, withVar, {}));
  CHECK(kiln::loop::hostEvaluable(t, withVar, {v}));
  t.buffers.push_back({kiln::DType::Int64, false, "in"});
  CHECK(!kiln::loop::evalOnHost(t, b.load(0, c(0)), nullptr, none));
  CHECK(!kiln::loop::hostEvaluable(t, b.load(0, c(0)), {}));
}
