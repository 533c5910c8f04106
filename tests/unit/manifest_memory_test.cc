// The memory pass on its own: each kernel call's output memory, the arenas of
// storage planning, the kernels' numbering, and the plan as kilnc prints it.
#include <doctest/doctest.h>

#include <string>

#include "compiler/frontend.h"
#include "compiler/pipeline.h"
#include "compiler/passes/manifest_memory.h"
#include "kiln/compile.h"

namespace {

using namespace kiln::compiler;

struct Planned {
  Stages stages;
  std::unique_ptr<KernelTableBuilder> kernels;
  MemoryPlan plan;
};

Planned plan(const char* source, bool planMemory = true) {
  Planned p;
  kiln::CompileOptions options;
  options.planMemory = planMemory;
  p.stages = runPasses(source, "plan.relay", options);
  p.kernels = std::make_unique<KernelTableBuilder>(*p.stages.placed.module);
  p.plan = onCompilerStack([&] {
    return manifestMemory(*p.stages.placed.module, *p.kernels, ManifestOptions{planMemory, &p.stages.placed.plan});
  });
  return p;
}

// The decision for the call bound to `var` in `function`.
const KernelCallMemory& callBoundTo(const MemoryPlan& plan, const char* function, const char* var) {
  const FunctionMemory& f = plan.of(function);
  for (const kiln::ir::Call* c : f.order) {
    const KernelCallMemory& m = f.calls.at(c);
    if (m.boundTo && m.boundTo->name == var) return m;
  }
  FAIL("no kernel call bound to %" << var);
  return f.calls.begin()->second;
}

// A chain of three static kernels (products do not fuse with each other) whose
// outputs only kernels read, a dynamic one, a host-scalar one and a reshape.
constexpr const char* kChain = R"(
def @main(%x: Tensor[(64, 64), float32], %w: Tensor[(64, 64), float32], %y: Tensor[(?, 8), float32], %n: int32) {
  let %a = nn.dense(%x, %w);
  let %b = nn.dense(%a, %w);
  let %c = nn.dense(%b, %w);
  let %e = nn.dense(%c, %w);
  let %d = log(%y);
  let %m = %n - 1;
  let %r = reshape(%x, newshape=[4096]);
  (%e, %r, %d, %m)
}
)";

}  // namespace

TEST_CASE("manifest memory: static kernel outputs share storage - dynamic, scalar and reshape calls are decided") {
  Planned p = plan(kChain);
  const FunctionMemory& f = p.plan.of("main");
  // One arena for the whole run would hold %a's place while %c and %e live, so
  // the planner ping-pongs instead: %c reuses %a's storage, %b has its own.
  REQUIRE(f.arenas.size() == 1);
  CHECK(f.arenas[0].bytes == 64 * 64 * 4);
  const KernelCallMemory& a = callBoundTo(p.plan, "main", "a");
  CHECK(a.source == OutputMemory::Arena);
  CHECK(a.slot.first);
  CHECK_FALSE(a.slot.last);
  const KernelCallMemory& c = callBoundTo(p.plan, "main", "c");
  CHECK(c.source == OutputMemory::Arena);
  CHECK(c.slot.arena == a.slot.arena);
  CHECK(c.slot.last);
  CHECK(c.slot.offset == 0);
  CHECK(callBoundTo(p.plan, "main", "b").source == OutputMemory::Static);
  CHECK(callBoundTo(p.plan, "main", "e").source == OutputMemory::Static);  // it is the result
  CHECK(callBoundTo(p.plan, "main", "d").source == OutputMemory::ShapeFunction);
  CHECK(callBoundTo(p.plan, "main", "m").kind == CallKind::Scalar);
  CHECK(callBoundTo(p.plan, "main", "r").kind == CallKind::Reshape);
  // Program order, and the kernels numbered in the order the pass met them.
  REQUIRE(f.order.size() == 7);
  CHECK(f.calls.at(f.order.front()).boundTo->name == "a");
  CHECK(p.kernels->kernels().size() == 4);  // the four products are one kernel
}

TEST_CASE("manifest memory: without planning every static output gets its own storage") {
  Planned p = plan(kChain, false);
  const FunctionMemory& f = p.plan.of("main");
  CHECK(f.arenas.empty());
  for (const char* v : {"a", "b", "c", "e"}) CHECK(callBoundTo(p.plan, "main", v).source == OutputMemory::Static);
}

TEST_CASE("manifest memory: an output read by something other than a kernel is not planned") {
  Planned p = plan(R"(
def @main(%x: Tensor[(64, 64), float32], %w: Tensor[(64, 64), float32]) {
  let %a = nn.dense(%x, %w);
  let %b = nn.dense(%a, %w);
  let %c = nn.dense(%b, %w);
  (%a, %c)
}
)");
  CHECK(callBoundTo(p.plan, "main", "a").source == OutputMemory::Static);  // it escapes into the result
}

TEST_CASE("manifest memory: the printed plan names each call's memory") {
  Planned p = plan(kChain);
  std::string text = p.plan.toString();
  CHECK(text.find("// @main: 7 kernel calls, 1 shared arena") != std::string::npos);
  CHECK(text.find("arena 0: 16384 bytes on cpu") != std::string::npos);
  CHECK(text.find("%a = k3 fused_nn_dense on cpu: arena 0 at 0 (allocates its 16384 bytes)") != std::string::npos);
  CHECK(text.find("storage sized at run time by the kernel's shape function") != std::string::npos);
  CHECK(text.find("host scalars in registers, no memory") != std::string::npos);
  CHECK(text.find("a view of its input, no memory") != std::string::npos);
}
