// Stopping a run (kiln/vm.h, "Stopping a run"): VMOptions::timeLimit and
// VirtualMachine::requestStop end loops, recursion through closures and forked
// calls with a kiln::Error, and the VM runs the next call as before.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "bytecode/instruction_writer.h"
#include "bytecode/opcodes.h"
#include "device/thread_pool.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"
#include "test_util.h"
#include "tree_program.h"

namespace {

using kiln::Value;
using Clock = std::chrono::steady_clock;

// @spin never returns (an int64 counter from 0 never falls below -1); @count
// returns n; @spin_closure loops through a local closure; @two_spins forks.
const char* kLoops = R"(
def @spin(%i: int64) -> int64 {
  if (%i < -1i64) { %i } else { @spin(%i + 1i64) }
}
def @count(%i: int64, %n: int64) -> int64 {
  if (%i == %n) { %i } else { @count(%i + 1i64, %n) }
}
def @spin_closure(%start: int64) -> int64 {
  let %f = fn (%i: int64) -> int64 { if (%i < -1i64) { %i } else { %f(%i + 1i64) } };
  %f(%start)
}
def @two_spins(%a: int64, %b: int64) -> (int64, int64) {
  (@spin(%a), @spin(%b))
}
)";

Value i64(int64_t v) { return Value::intScalar(kiln::DType::Int64, v); }

std::string errorOf(const std::function<void()>& f) { return kiln::test::thrownBy(f); }

double millisSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

TEST_CASE("stop: a time limit ends an endless loop with an error, and the VM runs on") {
  auto exe = kiln::compile(kLoops, "loops.relay");
  kiln::VMOptions o;
  o.timeLimit = std::chrono::milliseconds(50);
  kiln::VirtualMachine vm(exe, o);
  for (const char* f : {"spin", "spin_closure"}) {
    CAPTURE(f);
    auto t0 = Clock::now();
    std::string e = errorOf([&] { vm.invoke(f, {i64(0)}); });
    double ms = millisSince(t0);
    CHECK(e.find("longer than its time limit (VMOptions::timeLimit, 50.0 ms)") != std::string::npos);
    CHECK(ms >= 45);
    CHECK(ms < 5000);
    // The next invoke has a time limit of its own, and finishes inside it.
    CHECK(vm.invoke("count", {i64(0), i64(2000)}).intValue() == 2000);
  }
}

TEST_CASE("stop: requestStop from another thread ends the running invoke only") {
  auto exe = kiln::compile(kLoops, "loops.relay");
  kiln::VirtualMachine vm(exe);
  // A request while nothing runs is dropped when the next invoke starts.
  vm.requestStop();
  CHECK(vm.invoke("count", {i64(0), i64(1000)}).intValue() == 1000);
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    vm.requestStop();
  });
  auto t0 = Clock::now();
  std::string e = errorOf([&] { vm.invoke("spin", {i64(0)}); });
  watchdog.join();
  CHECK(e.find("in @spin: the run was stopped (VirtualMachine::requestStop)") != std::string::npos);
  CHECK(millisSince(t0) < 5000);
  CHECK(vm.invoke("count", {i64(5), i64(7)}).intValue() == 7);
}

TEST_CASE("stop: a forked call stops with the run that forked it") {
  auto exe = kiln::compile(kLoops, "loops.relay");
  std::string code;
  for (uint32_t f = 0; f < exe->functions().size(); ++f) code += exe->disassemble(f);
  REQUIRE(code.find("fork r") != std::string::npos);
  kiln::VMOptions o;
  o.runtime = kiln::test::runtimeWith(2);
  o.timeLimit = std::chrono::milliseconds(50);
  kiln::VirtualMachine vm(exe, o);
  auto t0 = Clock::now();
  std::string e = errorOf([&] { vm.invoke("two_spins", {i64(0), i64(0)}); });
  CHECK(e.find("time limit") != std::string::npos);
  CHECK(millisSince(t0) < 5000);
  // Both calls ran at once: the first went to the pool's worker, and stopped
  // there too (otherwise the error above would have waited for it forever).
  CHECK(o.runtime->threadPool()->stats().started == 1);
  CHECK(vm.invoke("count", {i64(0), i64(3)}).intValue() == 3);
}

TEST_CASE("stop: a backward jump in a loaded executable is a stop point too") {
  // The compiler writes loops as tail calls; an executable from elsewhere may
  // loop with a jump back, which must stop as well.
  auto exe = kiln::compile("def @main(%x: int64) -> int64 { %x }", "jump.relay");
  kiln::Executable::Contents c = exe->contents();
  kiln::bytecode::InstructionWriter w;
  w.emitWords(kiln::bytecode::Opcode::Goto, {0});  // to itself, for ever
  w.emitWords(kiln::bytecode::Opcode::Ret, {0});
  auto& main = c.functions[static_cast<size_t>(exe->functionIndex("main"))];
  main.code = w.take();
  auto looping = kiln::Executable::build(std::move(c));
  kiln::VMOptions o;
  o.timeLimit = std::chrono::milliseconds(30);
  kiln::VirtualMachine vm(looping, o);
  auto t0 = Clock::now();
  CHECK(errorOf([&] { vm.invoke("main", {i64(1)}); }).find("in @main: the run took longer than its time limit") !=
        std::string::npos);
  CHECK(millisSince(t0) < 5000);
}
