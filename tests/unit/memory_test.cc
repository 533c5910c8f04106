// Memory: the measured peak against the liveness lower bound for every sample,
// flat memory over a long allocating loop, branch-aware release, moved call
// arguments, a failed match test releasing only the fields it loaded, storage
// planning and the byte limit, all through the public API.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "kiln/vm.h"

namespace {

using kiln::DType;
using kiln::Tensor;
using kiln::Value;

Tensor filled(std::initializer_list<int64_t> shape, float seed) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return t;
}

struct Sample {
  const char* file;
  const char* weights;  // npz in samples/, or null
  std::vector<Value> inputs;
};

std::vector<Sample> samples() {
  Value i3 = Value::intScalar(DType::Int32, 3);
  auto f = [](double v) { return Value::floatScalar(DType::Float32, v); };
  return {
      {"tree_sum", nullptr, {f(1), f(2), f(3)}},
      {"grow_loop", nullptr, {Value(filled({1, 4}, 0)), i3}},
      {"lstm_list",
       nullptr,
       {Value(filled({1, 8}, 1)), Value(filled({1, 8}, 2)), Value(filled({1, 8}, 3)), Value(filled({64, 8}, 4)),
        Value(filled({64, 16}, 5)), Value(filled({64}, 6))}},
      {"mlp", "mlp_weights", {Value(filled({2, 784}, 7))}},
      {"cnn", "cnn_weights", {Value(filled({1, 3, 32, 32}, 8))}},
  };
}

struct Measured {
  uint64_t peak = 0, bound = 0, allocations = 0;
  std::string result;
};

Measured run(const Sample& s, bool plan) {
  kiln::CompileOptions opts;
  opts.planMemory = plan;
  std::string dir = std::string(KILN_SOURCE_DIR) + "/samples/";
  if (s.weights) opts.params = kiln::readNpz(dir + s.weights + ".npz");
  auto exe = kiln::compileFile(dir + s.file + ".relay", opts);
  kiln::VirtualMachine vm(exe);
  vm.enableMemoryTrace();
  Value r = vm.invoke("main", s.inputs);
  Measured m;
  m.result = exe->format(r);
  auto stats = vm.memoryStats();
  m.allocations = stats.allocations;
  for (const auto& p : stats.pools) m.peak = std::max(m.peak, p.peakBytesInUse);
  for (auto& [d, b] : vm.livenessLowerBound()) m.bound = std::max(m.bound, b);
  return m;
}

uint64_t inUse(const kiln::VirtualMachine& vm) {
  uint64_t n = 0;
  for (const auto& p : vm.memoryStats().pools) n += p.bytesInUse;
  return n;
}

uint64_t peak(const kiln::VirtualMachine& vm) {
  uint64_t n = 0;
  for (const auto& p : vm.memoryStats().pools) n = std::max(n, p.peakBytesInUse);
  return n;
}

// Function `fn`'s listing in a disassembly (functions are separated by a blank line).
std::string functionText(const std::string& text, const std::string& fn) {
  std::string f = text.substr(text.find("def @" + fn + "("));
  return f.substr(0, f.find("\n\n"));
}

}  // namespace

TEST_CASE("memory: each sample's peak is within 1.15x of its liveness lower bound, with and without planning") {
  for (const Sample& s : samples()) {
    std::string name = s.file;
    CAPTURE(name);
    Measured planned = run(s, true), unplanned = run(s, false);
    MESSAGE(std::string(s.file) << ": peak " << planned.peak << " bytes, lower bound " << planned.bound << ", ratio "
                   << (planned.bound ? static_cast<double>(planned.peak) / static_cast<double>(planned.bound) : 0.0)
                   << "; without planning: peak " << unplanned.peak << ", " << unplanned.allocations
                   << " allocations (planned: " << planned.allocations << ")");
    CHECK(planned.result == unplanned.result);
    if (planned.bound == 0) {
      CHECK(planned.peak == 0);  // tree_sum: every value is a register scalar
    } else {
      CHECK(static_cast<double>(planned.peak) <= 1.15 * static_cast<double>(planned.bound));
      CHECK(planned.peak >= planned.bound);
    }
    CHECK(planned.allocations <= unplanned.allocations);
  }
}

TEST_CASE("memory: 100,000 iterations that allocate temporaries keep bytes in use flat") {
  auto exe = kiln::compile(R"(
def @step(%x: Tensor[(256,), float32], %k: int32) -> Tensor[(256,), float32] {
  let %a = tanh(%x);
  let %b = %a * 0.5f;
  let %cells = Cons(%b, Cons(%a, Nil));
  let %s = sum(%b) + cast(%k, dtype="float32");
  match (%cells) {
    Cons(%h, _) => %h + %s * 0f,
    Nil => %x
  }
}
def @loop(%n: int32, %x: Tensor[(256,), float32]) -> Tensor[(256,), float32] {
  if (%n == 0) { %x } else { @loop(%n - 1, @step(%x, %n)) }
}
def @main(%n: int32, %x: Tensor[(256,), float32]) -> Tensor[(256,), float32] { @loop(%n, %x) }
)",
                           "loop.relay");
  kiln::VirtualMachine vm(exe);
  Tensor x = filled({256}, 0);
  Value few = vm.invoke("main", {Value::intScalar(DType::Int32, 10), Value(x)});
  uint64_t peakFew = peak(vm);
  few = Value();
  CHECK(inUse(vm) == 0);
  Value many = vm.invoke("main", {Value::intScalar(DType::Int32, 100'000), Value(x)});
  // 100,000 iterations need no more than 10 did: nothing accumulates.
  CHECK(peak(vm) == peakFew);
  CHECK(inUse(vm) == 1024 + 0);  // the result alone (256 float32)
  many = Value();
  CHECK(inUse(vm) == 0);
  auto pool = vm.memoryStats().pools.at(0);
  CHECK(pool.misses < 16);  // the steady state is served from the pool
  CHECK(pool.hits > 100'000);
}

TEST_CASE("memory: a loop step's released output is recycled for the next step - kept outputs never are") {
  auto exe = kiln::compile(R"(
def @chain(%n: int32, %t: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
  if (%n == 0) { %t } else { @chain(%n - 1, %t * 2f - %t + 1f) }
}
def @keep(%n: int32, %t: Tensor[(4,), float32], %acc: List[Tensor[(4,), float32]]) -> List[Tensor[(4,), float32]] {
  if (%n == 0) { %acc } else { let %u = %t * 2f - %t + 1f; @keep(%n - 1, %u, Cons(%u, %acc)) }
}
def @main(%n: int32, %t: Tensor[(4,), float32]) -> (Tensor[(4,), float32], List[Tensor[(4,), float32]]) {
  (@chain(%n, %t), @keep(5, %t, Nil))
}
)",
                           "recycle.relay");
  kiln::VMOptions options;
  options.pools = std::make_shared<kiln::MemoryPools>();  // this test's counts alone
  kiln::VirtualMachine vm(exe, options);
  Tensor zeros = Tensor::empty(DType::Float32, {4});
  for (int i = 0; i < 4; ++i) zeros.data<float>()[i] = 0;
  Value r = vm.invoke("main", {Value::intScalar(DType::Int32, 1000), Value(zeros)});
  // Each step's output is the next step's input, released after its kernel: the
  // step after takes it back, and the pool is asked only a few times.
  for (int i = 0; i < 4; ++i) CHECK(r.fields()[0].tensor().data<float>()[i] == 1000.0f);
  auto stats = vm.memoryStats();
  CHECK(stats.allocations > 1000);
  const kiln::PoolStats& pool = stats.pools.at(0);
  CHECK(pool.hits + pool.misses < 50);
  // Outputs a list keeps are shared, so each keeps its own value.
  std::vector<float> kept;
  for (const Value* at = &r.fields()[1]; at->fields().size() == 2; at = &at->fields()[1]) kept.push_back(at->fields()[0].tensor().data<float>()[3]);
  CHECK(kept == std::vector<float>{5, 4, 3, 2, 1});
  // Nothing recycled outlives the run.
  r = Value();
  CHECK(inUse(vm) == 0);
}

TEST_CASE("memory: what dies right before a return is left to ret, which recycles it like a release") {
  // @step's input dies at its kernel, the last instruction before the return:
  // no release there; ret drops it, and the next call's output takes it back.
  // Non-tail recursion, so every level returns through ret.
  auto exe = kiln::compile(R"(
def @step(%t: Tensor[(4,), float32]) -> Tensor[(4,), float32] { %t * 2f - %t + 1f }
def @down(%n: int32, %t: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
  if (%n == 0) { %t } else { @step(@down(%n - 1, %t)) }
}
def @main(%n: int32, %t: Tensor[(4,), float32]) -> Tensor[(4,), float32] { @down(%n, %t) }
)",
                           "ret_recycles.relay");
  std::string text = exe->disassemble();
  INFO(text);
  std::string step = functionText(text, "step");
  CHECK(step.find("release") == std::string::npos);
  CHECK(step.find("ret ") != std::string::npos);
  kiln::VMOptions options;
  options.pools = std::make_shared<kiln::MemoryPools>();  // this test's counts alone
  kiln::VirtualMachine vm(exe, options);
  Tensor zeros = Tensor::empty(DType::Float32, {4});
  for (int i = 0; i < 4; ++i) zeros.data<float>()[i] = 0;
  Value r = vm.invoke("main", {Value::intScalar(DType::Int32, 500), Value(zeros)});
  for (int i = 0; i < 4; ++i) CHECK(r.tensor().data<float>()[i] == 500.0f);
  kiln::VMMemoryStats stats = vm.memoryStats();
  CHECK(stats.allocations >= 500);
  const kiln::PoolStats& pool = stats.pools.at(0);
  CHECK(pool.hits + pool.misses < 50);
  r = Value();
  CHECK(inUse(vm) == 0);
}

TEST_CASE("memory: a value used only by one branch is released on entry to the other") {
  auto exe = kiln::compile(R"(
def @main(%c: bool, %x: Tensor[(4096,), float32]) -> Tensor[(4096,), float32] {
  let %big = exp(%x);
  if (%c) { %big + 1f } else { let %y = tanh(%x); let %z = %y * 2f; %z }
}
)",
                           "branch.relay");
  kiln::VirtualMachine vm(exe);
  Tensor x = filled({4096}, 1);
  vm.invoke("main", {Value::intScalar(DType::Bool, 0), Value(x)});
  // else: %big dies on entry, before %y exists: one 16 KiB tensor at a time
  // (holding %big to the end of the function would need two).
  CHECK(peak(vm) == 16384);
  kiln::VirtualMachine vm2(exe);
  vm2.invoke("main", {Value::intScalar(DType::Bool, 1), Value(x)});
  CHECK(peak(vm2) == 2 * 16384);  // then: %big and its successor
}

TEST_CASE("memory: a tensor passed to a call as its last use is moved, not held by the caller") {
  auto exe = kiln::compile(R"(
def @down(%n: int32, %x: Tensor[(4096,), float32]) -> Tensor[(4096,), float32] {
  if (%n == 0) { %x } else {
    let %y = %x + 1f;
    let %r = @down(%n - 1, %y);
    %r * 2f
  }
}
)",
                           "down.relay");
  kiln::VirtualMachine vm(exe);
  Tensor x = filled({4096}, 2);
  Value r = vm.invoke("down", {Value::intScalar(DType::Int32, 200), Value(x)});
  CHECK(r.tensor().data<float>()[0] > 0);
  // Each frame's %y moves into the callee; holding them would need 200 x 16 KiB.
  CHECK(peak(vm) <= 2 * 16384);
}

TEST_CASE("memory: planning packs a static chain into one arena and keeps the results") {
  const char* src = R"(
def @main(%x: Tensor[(1024,), float32]) -> Tensor[(1024,), float32] {
  let %a = sum(exp(%x), axis=[0], keepdims=True) + %x;
  let %b = sum(tanh(%a), axis=[0], keepdims=True) * %a;
  let %c = sum(sigmoid(%b), axis=[0], keepdims=True) - %b;
  let %d = sum(exp(%c), axis=[0], keepdims=True) + %c;
  let %e = sum(tanh(%d), axis=[0], keepdims=True) * %d;
  let %f = sum(sigmoid(%e), axis=[0], keepdims=True) - %e;
  %f * 3f
}
)";
  kiln::CompileOptions on, off;
  off.planMemory = false;
  auto planned = kiln::compile(src, "chain.relay", on);
  auto unplanned = kiln::compile(src, "chain.relay", off);
  auto count = [](const kiln::Executable& exe, const std::string& what) {
    std::string text = exe.disassemble();
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  // Unplanned, every tensor gets a block of its own (alloc_tensor_own).
  CHECK(count(*planned, "alloc_storage ") + count(*planned, "alloc_tensor_own ") <
        count(*unplanned, "alloc_storage ") + count(*unplanned, "alloc_tensor_own "));
  Tensor x = filled({1024}, 3);
  kiln::VirtualMachine a(planned), b(unplanned);
  Tensor ra = a.invoke("main", {Value(x)}).tensor(), rb = b.invoke("main", {Value(x)}).tensor();
  for (int i = 0; i < 1024; ++i) CHECK(ra.data<float>()[i] == rb.data<float>()[i]);
  CHECK(a.memoryStats().allocations < b.memoryStats().allocations);
  CHECK(peak(a) <= peak(b) + peak(b) / 32);
}

TEST_CASE("memory: over the byte limit, a kiln::Error names the device and the limit - the VM recovers") {
  auto exe = kiln::compile(R"(
def @main(%x: Tensor[(?,), float32]) -> Tensor[(?,), float32] { exp(%x) + 1f }
)",
                           "limit.relay");
  kiln::VMOptions o;
  o.memoryLimit = 64 * 1024;
  kiln::VirtualMachine vm(exe, o);
  Tensor big = Tensor::empty(DType::Float32, {100'000});
  for (int i = 0; i < 100'000; ++i) big.data<float>()[i] = 0;
  try {
    vm.invoke("main", {Value(big)});
    FAIL("expected out of memory");
  } catch (const kiln::Error& e) {
    std::string m = e.message();
    CHECK(m.find("out of memory on cpu") != std::string::npos);
    CHECK(m.find("limit is 65536 bytes") != std::string::npos);
  }
  Tensor small = filled({100}, 4);
  CHECK(vm.invoke("main", {Value(small)}).tensor().shape() == kiln::Shape{100});
}

namespace {

// Where each br_not_ctor of function `fn` lands: the instruction there, in order.
// Runs a list program's @main(%x, %two) with one list cell, two, and one again:
// element 5 of the result is exp(x) + x for two cells and oneCell * exp(x) for
// one (`owned`: checked not to be a view), and nothing is in use once the
// result is dropped.
void runOneAndTwoCells(const std::shared_ptr<const kiln::Executable>& exe, float oneCell, bool owned) {
  kiln::VirtualMachine vm(exe);
  Tensor x = filled({4096}, 3);
  for (bool two : {false, true, false}) {
    Value r = vm.invoke("main", {Value(x), Value::intScalar(DType::Bool, two ? 1 : 0)});
    if (owned) CHECK_FALSE(r.isView());
    float want = two ? std::exp(x.data<float>()[5]) + x.data<float>()[5] : oneCell * std::exp(x.data<float>()[5]);
    CHECK(r.tensor().data<float>()[5] == doctest::Approx(want).epsilon(1e-5));
    r = Value();
    CHECK(inUse(vm) == 0);
  }
}

std::vector<std::string> failedTestLandings(const std::string& text, const std::string& fn) {
  std::map<int, std::string> at;
  std::istringstream lines(functionText(text, fn));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && !line.empty()) {
    std::istringstream fields(line);
    int offset = 0;
    fields >> offset;
    std::string rest;
    std::getline(fields >> std::ws, rest);
    at[offset] = rest;
  }
  std::vector<std::string> landings;
  for (const auto& [offset, ins] : at) {
    size_t arrow = ins.find("->");
    if (ins.rfind("br_not_ctor", 0) == 0 && arrow != std::string::npos) landings.push_back(at[std::stoi(ins.substr(arrow + 2))]);
  }
  return landings;
}

}  // namespace

TEST_CASE("memory: a failed match test releases the fields its clause loaded, and only those") {
  // The first clause loads %a and the tail, then fails on a one-element list
  // (both released before the next test); the second fails on its constructor
  // test, before loading anything (nothing to release). The list @pick takes
  // apart is a call's result, owned by its frame: a parameter would be pinned,
  // its fields views that nothing releases (the second half of the test).
  auto exe = kiln::compile(R"(
type L { C(Tensor[(4096,), float32], L), N }
def @same(%l: L) -> L { %l }
def @pick(%p: L) -> Tensor[(4096,), float32] {
  let %l = @same(%p);
  match (%l) {
    C(%a, C(%b, _)) => %a + %b,
    N => zeros(shape=[4096], dtype="float32"),
    C(%a, N) => %a * 2f,
  }
}
def @main(%x: Tensor[(4096,), float32], %two: bool) -> Tensor[(4096,), float32] {
  let %e = exp(%x);
  let %l = if (%two) { C(%e, C(%x, N)) } else { C(%e, N) };
  @pick(%l)
}
)",
                           "nested_match.relay");
  std::string text = exe->disassemble();
  INFO(text);
  runOneAndTwoCells(exe, 2, false);
  // @pick's tests by offset: where each failed test lands. The outer test of
  // the first clause lands on the second clause's test (no field loaded yet);
  // its nested test, on the release of the two fields it loaded.
  std::vector<std::string> landings = failedTestLandings(text, "pick");
  REQUIRE(landings.size() >= 3);
  CHECK(landings[0].find(", N, ->") != std::string::npos);
  CHECK(landings[1].rfind("release", 0) == 0);
  // The second clause's test lands on the last clause, which tests nothing (the
  // match is exhaustive, so a value that gets there matches it): it loads %a.
  CHECK(landings[2].rfind("get_field ", 0) == 0);
  std::string pick = functionText(text, "pick");
  CHECK(pick.find("fatal") == std::string::npos);
  CHECK(text.find("get_field_view") == std::string::npos);
}

TEST_CASE("memory: a parameter a match takes apart is pinned: its fields are views, released by no one") {
  auto exe = kiln::compile(R"(
type L { C(Tensor[(4096,), float32], L), N }
def @pick(%l: L) -> Tensor[(4096,), float32] {
  match (%l) {
    C(%a, C(%b, _)) => %a + %b,
    N => zeros(shape=[4096], dtype="float32"),
    C(%a, N) => %a,
  }
}
def @main(%x: Tensor[(4096,), float32], %two: bool) -> Tensor[(4096,), float32] {
  let %e = exp(%x);
  let %l = if (%two) { C(%e, C(%x, N)) } else { C(%e, N) };
  @pick(%l)
}
)",
                           "pinned_match.relay");
  std::string text = exe->disassemble();
  INFO(text);
  std::string pick = functionText(text, "pick");
  CHECK(pick.find("get_field_view") != std::string::npos);
  CHECK(pick.find(" get_field ") == std::string::npos);
  CHECK(pick.find("release") == std::string::npos);
  // Failed tests go straight to the next clause: nothing to release.
  for (const std::string& l : failedTestLandings(text, "pick")) CHECK(l.rfind("release", 0) != 0);
  // `C(%a, N) => %a` returns a view of the list's field: an owned value, alive after the list is gone.
  runOneAndTwoCells(exe, 1, true);
}
