// The VM through the C++ API: values in and out, argument checks, save and load,
// the loader's verifier against corrupted images, concurrency over one shared
// executable, and the MLP sample against a plain-loop reference.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "bytecode/instruction_writer.h"
#include "bytecode/opcodes.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "kiln/vm.h"
#include "test_util.h"

namespace {

using kiln::Tensor;
using kiln::Value;

Tensor vec(std::initializer_list<float> v) {
  Tensor t = Tensor::empty(kiln::DType::Float32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

std::string errorOf(const std::function<void()>& f) { return kiln::test::thrownBy(f); }

const char* kProgram = R"(
def @sum_up(%n: int32, %acc: int32) -> int32 {
  if (%n == 0) { %acc } else { @sum_up(%n - 1, %acc + %n) }
}
def @main(%x: Tensor[(4,), float32], %n: int32) {
  (%x * 2f + cast(%n, dtype="float32"), @sum_up(%n, 0))
}
def @total(%l: List[Tensor[(4,), float32]]) -> Tensor[(4,), float32] {
  @foldl(fn (%a: Tensor[(4,), float32], %b: Tensor[(4,), float32]) { %a + %b }, zeros(shape=[4], dtype="float32"), %l)
}
)";

}  // namespace

TEST_CASE("vm: invoke with tensors and scalars, get a tuple back") {
  auto exe = kiln::compile(kProgram, "t.relay");
  kiln::VirtualMachine vm(exe);
  Value r = vm.invoke("main", {Value(vec({1, 2, 3, 4})), Value::intScalar(kiln::DType::Int32, 10)});
  REQUIRE(r.isTuple());
  Tensor t = r.fields()[0].tensor();
  CHECK(t.data<float>()[0] == 12.0f);
  CHECK(t.data<float>()[3] == 18.0f);
  CHECK(r.fields()[1].tensor().data<int32_t>()[0] == 55);
  CHECK(exe->format(r) == "(4xf32=[12 14 16 18], i32=55)");
}

TEST_CASE("vm: ADT arguments built through the constructor table") {
  auto exe = kiln::compile(kProgram, "t.relay");
  kiln::VirtualMachine vm(exe);
  uint32_t cons = static_cast<uint32_t>(exe->constructorId("Cons")), nil = static_cast<uint32_t>(exe->constructorId("Nil"));
  Value list = Value::adt(nil, {});
  for (int i = 0; i < 3; ++i) list = Value::adt(cons, {Value(vec({1, 2, 3, float(i)})), list});
  Value r = vm.invoke("total", {list});
  CHECK(exe->format(r) == "4xf32=[3 6 9 3]");
}

TEST_CASE("vm: arguments are checked and errors name the parameter") {
  auto exe = kiln::compile(kProgram, "t.relay");
  kiln::VirtualMachine vm(exe);
  CHECK(errorOf([&] { vm.invoke("main", {Value(vec({1, 2, 3, 4}))}); }) == "error: @main takes 2 arguments, got 1");
  CHECK(errorOf([&] { vm.invoke("main", {Value(vec({1, 2, 3})), Value::intScalar(kiln::DType::Int32, 1)}); }) ==
        "error: argument 'x' of @main (Tensor[(4,), float32]): shape 3 where dimension 0 must be 4");
  CHECK(errorOf([&] { vm.invoke("main", {Value(vec({1, 2, 3, 4})), Value::floatScalar(kiln::DType::Float32, 1)}); }) ==
        "error: argument 'n' of @main (Tensor[(), int32]): dtype float32 where int32 is expected");
  CHECK(errorOf([&] { vm.invoke("nope", {}); }) == "error: no function named 'nope' in the executable");
  // The VM stays usable after errors.
  Value r = vm.invoke("main", {Value(vec({0, 0, 0, 0})), Value::intScalar(kiln::DType::Int32, 3)});
  CHECK(exe->format(r) == "(4xf32=[3 3 3 3], i32=6)");
}

TEST_CASE("vm: run-time failures are errors naming the function - the VM recovers") {
  auto exe = kiln::compile(R"(
    def @first(%l: List[int32]) -> int32 { match? (%l) { Cons(%x, _) => %x } }
    def @deep(%n: int32) -> int32 { if (%n == 0) { 0 } else { 1 + @deep(%n - 1) } }
    def @main(%n: int32) -> int32 { @first(if (%n == 0) { Nil } else { Cons(%n, Nil) }) })",
                           "t.relay");
  kiln::VMOptions opts;
  opts.maxCallDepth = 500;
  kiln::VirtualMachine vm(exe, opts);
  CHECK(errorOf([&] { vm.invoke("main", {Value::intScalar(kiln::DType::Int32, 0)}); })
            .find("error: in @first: match? at t.relay:2:44: no clause matches") == 0);
  CHECK(errorOf([&] { vm.invoke("deep", {Value::intScalar(kiln::DType::Int32, 10000)}); }) ==
        "error: in @deep: recursion too deep (more than 500 nested calls)");
  CHECK(vm.invoke("deep", {Value::intScalar(kiln::DType::Int32, 100)}).intValue() == 100);
  CHECK(vm.invoke("main", {Value::intScalar(kiln::DType::Int32, 7)}).intValue() == 7);
}

TEST_CASE("vm: a list of a million cells is built, returned and freed without recursion") {
  auto exe = kiln::compile(R"(
    def @build(%n: int32, %acc: List[int32]) -> List[int32] { if (%n == 0) { %acc } else { @build(%n - 1, Cons(%n, %acc)) } }
    def @main(%n: int32) -> int32 { @length(@build(%n, Nil)) })",
                           "t.relay");
  kiln::VirtualMachine vm(exe);
  CHECK(vm.invoke("main", {Value::intScalar(kiln::DType::Int32, 500000)}).intValue() == 500000);
  Value l = vm.invoke("build", {Value::intScalar(kiln::DType::Int32, 1000000), Value::adt(1, {})});
  CHECK(l.isAdt());
}

TEST_CASE("value: freeing a wide, deep structure frees every object in it once") {
  // Storage blocks whose buffers count their frees: a tuple of 100 (more than the
  // destroy worklist keeps on the stack), each field a pair of a block and a
  // chain of 50 nested tuples ending in a block, with one block shared by all.
  int freed = 0;
  auto block = [&freed] {
    return Value::storage(std::shared_ptr<void>(new char[16], [&freed](void* p) {
                            delete[] static_cast<char*>(p);
                            ++freed;
                          }),
                          16, kiln::Device{});
  };
  Value shared = block();
  std::vector<Value> fields;
  for (int i = 0; i < 100; ++i) {
    Value chain = block();
    for (int d = 0; d < 50; ++d) chain = Value::tuple({chain, shared});
    fields.push_back(Value::tuple({block(), chain}));
  }
  Value wide = Value::tuple(std::move(fields));
  CHECK(freed == 0);
  wide = Value();
  CHECK(freed == 200);
  shared = Value();
  CHECK(freed == 201);
  // A lone block and a tuple of a few, the common deaths.
  block();
  CHECK(freed == 202);
  Value few = Value::tuple({block(), block(), Value::intScalar(kiln::DType::Int32, 3)});
  few = Value();
  CHECK(freed == 204);
}

TEST_CASE("vm: reference cells are shared, mutable, and print without looping on a cycle") {
  auto exe = kiln::compile(R"(
    type Node { N(ref(Option[Node])) }
    def @cycle() -> Node { let %r = ref(None); let %n = N(%r); ref_write(%r, Some(%n)); %n }
    def @shared(%c: ref(int32)) -> (ref(int32), int32) {
      let %alias = %c;
      ref_write(%alias, ref_read(%c) * 10);
      (%c, ref_read(%c))
    })",
                           "t.relay");
  kiln::VirtualMachine vm(exe);
  Value cell = Value::ref(Value::intScalar(kiln::DType::Int32, 4));
  Value r = vm.invoke("shared", {cell});
  CHECK(exe->format(r) == "(ref(i32=40), i32=40)");
  CHECK(cell.asRef()->content.intValue() == 40);  // the caller's cell, written in place
  CHECK(errorOf([&] { vm.invoke("shared", {Value::intScalar(kiln::DType::Int32, 4)}); }).find("got scalar i32") != std::string::npos);

  Value n = vm.invoke("cycle", {});
  CHECK(exe->format(n) == "N(ref(Some(N(ref(...)))))");
  n.fields()[0].asRef()->content = Value();  // break the cycle, which counting alone never frees
}

TEST_CASE("executable: save and load give identical results - constants are used in place") {
  auto exe = kiln::compile(kProgram, "t.relay");
  std::vector<uint8_t> image = exe->serialize();
  auto loaded = kiln::Executable::fromBytes(image);
  CHECK(loaded->disassemble() == exe->disassemble());
  kiln::VirtualMachine a(exe), b(loaded);
  for (int n = 0; n < 5; ++n) {
    std::vector<Value> args{Value(vec({1, float(n), 3, 4})), Value::intScalar(kiln::DType::Int32, n)};
    CHECK(exe->format(a.invoke("main", args)) == loaded->format(b.invoke("main", args)));
  }
  CHECK(loaded->serialize() == image);
}

TEST_CASE("executable: every truncation and corruption of an image is refused with an error") {
  auto exe = kiln::compile(kProgram, "t.relay");
  std::vector<uint8_t> image = exe->serialize();
  for (size_t n = 0; n < image.size(); n += 7) {
    std::vector<uint8_t> cut(image.begin(), image.begin() + static_cast<long>(n));
    CHECK_THROWS_AS(kiln::Executable::fromBytes(cut), kiln::Error);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> bad = image;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    CHECK_THROWS_AS(kiln::Executable::fromBytes(bad), kiln::Error);
  }
  CHECK(errorOf([&] {
          std::vector<uint8_t> v = image;
          v[8] = 9;  // major version
          kiln::Executable::fromBytes(v);
        }).find("format version 9.") != std::string::npos);
}

TEST_CASE("verifier: corrupted instructions with a valid checksum are refused, never run") {
  auto exe = kiln::compile(kProgram, "t.relay");
  std::mt19937 rng(11);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    auto copy = kiln::Executable::fromBytes(exe->serialize())->contents();
    auto& f = copy.functions[rng() % copy.functions.size()];
    size_t at = rng() % f.code.size();
    uint32_t choices[] = {static_cast<uint32_t>(rng() % 40), static_cast<uint32_t>(rng() % 4), static_cast<uint32_t>(rng()), f.code[at] + 1, 0xFFFFFFFFu};
    f.code[at] = choices[rng() % 5];
    try {
      kiln::Executable::build(copy);
    } catch (const kiln::Error& e) {
      ++refused;
      CHECK(std::string(e.what()).find("error: ") == 0);
    }
  }
  CHECK(refused > 1000);  // most single-word corruptions break an invariant the verifier checks
}

TEST_CASE("vm: 8 threads, each with its own VM over one executable, 1000 calls each") {
  auto exe = kiln::compile(kProgram, "t.relay");
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      kiln::VirtualMachine vm(exe);
      for (int i = 0; i < 1000; ++i) {
        int n = (t * 1000 + i) % 200;
        float x = static_cast<float>(t * 7 + i);
        Value r = vm.invoke("main", {Value(vec({x, x + 1, x + 2, x + 3})), Value::intScalar(kiln::DType::Int32, n)});
        Tensor y = r.fields()[0].tensor();
        bool ok = r.fields()[1].tensor().data<int32_t>()[0] == n * (n + 1) / 2;
        for (int k = 0; k < 4; ++k) ok &= y.data<float>()[k] == (x + static_cast<float>(k)) * 2 + static_cast<float>(n);
        if (!ok) wrong++;
        done++;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(done == 8000);
  CHECK(wrong == 0);
}

TEST_CASE("samples: the MLP with npz weights matches a plain-loop reference") {
  auto w = kiln::readNpz(std::string(KILN_SOURCE_DIR) + "/samples/mlp_weights.npz");
  kiln::CompileOptions opts;
  opts.params = w;
  auto exe = kiln::compileFile(std::string(KILN_SOURCE_DIR) + "/samples/mlp.relay", opts);
  kiln::VirtualMachine vm(exe);
  const int batch = 3;
  Tensor x = Tensor::empty(kiln::DType::Float32, {batch, 784});
  for (int i = 0; i < batch * 784; ++i) x.data<float>()[i] = std::cos(0.01f * static_cast<float>(i));
  Tensor y = vm.invoke("main", {Value(x)}).tensor();
  REQUIRE(y.shape() == kiln::Shape{batch, 10});
  const float *w1 = w["w1"].data<float>(), *b1 = w["b1"].data<float>(), *w2 = w["w2"].data<float>(), *b2 = w["b2"].data<float>();
  for (int b = 0; b < batch; ++b) {
    double h[128], o[10], mx = -1e30, z = 0;
    for (int j = 0; j < 128; ++j) {
      double s = b1[j];
      for (int k = 0; k < 784; ++k) s += double(x.data<float>()[b * 784 + k]) * w1[j * 784 + k];
      h[j] = std::max(0.0, s);
    }
    for (int j = 0; j < 10; ++j) {
      double s = b2[j];
      for (int k = 0; k < 128; ++k) s += h[k] * w2[j * 128 + k];
      o[j] = s;
      mx = std::max(mx, s);
    }
    for (double& v : o) z += std::exp(v - mx);
    for (int j = 0; j < 10; ++j) CHECK(y.data<float>()[b * 10 + j] == doctest::Approx(std::exp(o[j] - mx) / z).epsilon(1e-4));
  }
}

TEST_CASE("value: a view holds no reference - copying or moving it out takes one, dropping it none") {
  Value owner(vec({1, 2, 3, 4}));
  auto refs = [&] { return owner.object()->refs.load(); };
  REQUIRE(refs() == 1u);
  Value v;
  v.view(owner);
  CHECK(v.isView());
  CHECK(v.isObject(kiln::ObjectKind::Tensor));
  CHECK(refs() == 1u);
  Value copy = v;  // owned
  CHECK_FALSE(copy.isView());
  CHECK(refs() == 2u);
  Value moved = std::move(v);  // owned; the view is gone
  CHECK_FALSE(moved.isView());
  CHECK(v.empty());
  CHECK(refs() == 3u);
  Value assigned;
  Value w;
  w.view(owner);
  assigned = std::move(w);
  CHECK_FALSE(assigned.isView());
  CHECK(refs() == 4u);
  w.view(owner);
  w = Value();  // a dropped view drops nothing
  CHECK(refs() == 4u);
  w.view(owner);
  w.view(copy);  // nor does one replaced
  CHECK(refs() == 4u);
  copy = Value();
  moved = Value();
  assigned = Value();
  CHECK(refs() == 1u);
  // A scalar has nothing to borrow: its view is a plain copy.
  Value s = Value::intScalar(kiln::DType::Int32, 7);
  Value sv;
  sv.view(s);
  CHECK_FALSE(sv.isView());
  CHECK(sv.intValue() == 7);
}

namespace {

// An executable of `kProgram` plus a one-parameter function "probe" with `code`
// (frame of 4 registers); the verifier's verdict, "" when it accepts.
std::string verdictOnProbe(std::vector<uint32_t> code) {
  auto exe = kiln::compile(kProgram, "t.relay");
  kiln::Executable::Contents c = exe->contents();
  kiln::BytecodeFunction f;
  f.name = "probe";
  f.numParams = 1;
  f.frameSize = 4;
  f.paramNames = {"t"};
  f.paramTypes = {kiln::TypeDesc{}};
  f.code = std::move(code);
  c.functions.push_back(f);
  try {
    kiln::Executable::build(std::move(c));
    return "";
  } catch (const kiln::Error& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("verifier: a view is only of a register that holds its value to the end, and never moved beside itself") {
  using kiln::bytecode::InstructionWriter;
  using kiln::bytecode::Opcode;
  uint32_t probe = static_cast<uint32_t>(kiln::compile(kProgram, "t.relay")->functions().size());
  auto program = [&](const std::function<void(InstructionWriter&)>& middle) {
    InstructionWriter w;
    w.emitWords(Opcode::GetFieldView, {1, 0, 0});
    w.emitWords(Opcode::GetFieldView, {2, 1, 0});  // a view of a view's field
    middle(w);
    w.emitWords(Opcode::Ret, {2});
    return w.take();
  };
  auto regs = [](std::vector<uint32_t> r) { return InstructionWriter::regs(std::move(r)); };
  auto word = [](uint64_t v) { return InstructionWriter::word(v); };
  // Accepted: the parameter and the views stay put; calls see them as views.
  CHECK(verdictOnProbe(program([](InstructionWriter&) {})) == "");
  CHECK(verdictOnProbe(program([&](InstructionWriter& w) {
          w.emit(Opcode::Invoke, {word(3), word(probe), regs({1 | kiln::bytecode::kViewBit})});
        })) == "");
  // Refused: the parameter released, overwritten, or moved into a call, and a
  // view register that something else writes.
  std::string released = verdictOnProbe(program([](InstructionWriter& w) { w.emitWords(Opcode::Release, {0}); }));
  CHECK(released.find("get_field_view of register 0") != std::string::npos);
  CHECK(verdictOnProbe(program([](InstructionWriter& w) { w.emitWords(Opcode::Move, {0, 3}); })).find("get_field_view") !=
        std::string::npos);
  CHECK(verdictOnProbe(program([&](InstructionWriter& w) {
          w.emit(Opcode::Invoke, {word(3), word(probe), regs({0 | kiln::bytecode::kMoveBit})});
        })).find("get_field_view") != std::string::npos);
  CHECK(verdictOnProbe(program([](InstructionWriter& w) { w.emitWords(Opcode::Move, {1, 3}); })).find("get_field_view of register 1") !=
        std::string::npos);
  // A list may not view and move one register, nor mark an entry both ways.
  InstructionWriter both;
  both.emit(Opcode::Invoke, {word(3), word(probe), regs({0 | kiln::bytecode::kViewBit | kiln::bytecode::kMoveBit})});
  both.emitWords(Opcode::Ret, {3});
  CHECK(verdictOnProbe(both.take()).find("both moved and viewed") != std::string::npos);
  InstructionWriter twice;
  twice.emit(Opcode::Invoke, {word(3), word(probe), regs({0 | kiln::bytecode::kViewBit, 0 | kiln::bytecode::kMoveBit})});
  twice.emitWords(Opcode::Ret, {3});
  CHECK(verdictOnProbe(twice.take()).find("passed as a view and moved") != std::string::npos);
  // A view bit is not a register bit in a list that takes none (`M`): out of the frame.
  InstructionWriter closure;
  closure.emit(Opcode::AllocTuple, {word(3), regs({0 | kiln::bytecode::kViewBit})});
  closure.emitWords(Opcode::Ret, {3});
  CHECK(verdictOnProbe(closure.take()).find("outside the frame") != std::string::npos);
}

TEST_CASE("vm: a value passed as a view and kept by the callee outlives the caller's reference") {
  // @keep stores its argument (a view: @main uses %e after the call) in the list
  // it returns; @main drops %e; the list still holds it. A tree recursion
  // passes its weights down as views and returns a field of a view.
  auto exe = kiln::compile(R"(
type T { Leaf(Tensor[(4,), float32]), Node(T, T) }
def @keep(%x: Tensor[(4,), float32]) -> List[Tensor[(4,), float32]] { Cons(%x, Nil) }
def @reduce(%t: T, %w: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
  match (%t) {
    Leaf(%v) => %v,
    Node(%l, %r) => (@reduce(%l, %w) + @reduce(%r, %w)) * %w,
  }
}
def @main(%x: Tensor[(4,), float32]) {
  let %e = exp(%x);
  let %l = @keep(%e);
  let %y = %e + 1f;
  let %t = Node(Node(Leaf(%x), Leaf(%y)), Leaf(%x));
  (%l, %y, @reduce(%t, %x), @reduce(Leaf(%e), %x))
}
)",
                           "views.relay");
  std::string text = exe->disassemble();
  INFO(text);
  CHECK(text.find("&r") != std::string::npos);
  CHECK(text.find("get_field_view") != std::string::npos);
  kiln::VirtualMachine vm(exe);
  Tensor x = vec({0.5f, 1, 1.5f, 2});
  for (int round = 0; round < 3; ++round) {
    Value r = vm.invoke("main", {Value(x)});
    std::span<const Value> out = r.fields();
    REQUIRE(out.size() == 4u);
    for (const Value& v : out) CHECK_FALSE(v.isView());
    const Value& kept = out[0].fields()[0];
    for (int i = 0; i < 4; ++i) {
      float xi = x.data<float>()[i], e = std::exp(xi), y = e + 1;
      CHECK(kept.tensor().data<float>()[i] == doctest::Approx(e));
      CHECK(out[2].tensor().data<float>()[i] == doctest::Approx(((xi + y) * xi + xi) * xi));
      CHECK(out[3].tensor().data<float>()[i] == doctest::Approx(e));
    }
    // The leaf's tensor returned by @reduce(Leaf(%e)) is %e itself, owned now.
    CHECK(out[3].tensor().data() == kept.tensor().data());
  }
}

TEST_CASE("vm: a loop counter read by a CPU kernel is not allocated per call") {
  // %t reaches the kernel of `take` as a 0-d tensor: over a slot of the VM's
  // frame, not a pool block per call (which came from the process's pools).
  const char* src = R"(
def @main(%xs: Tensor[(300, 4), float32]) -> Tensor[(4,), float32] {
  let %loop = fn (%t: int32, %acc: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
    if (%t == 300) { %acc } else { %loop(%t + 1, %acc + take(%xs, %t, axis=0)) }
  };
  %loop(0, zeros(shape=[4], dtype="float32"))
}
)";
  auto exe = kiln::compile(src, "t.relay");
  Tensor xs = Tensor::empty(kiln::DType::Float32, {300, 4});
  for (int64_t i = 0; i < 1200; ++i) xs.data<float>()[i] = static_cast<float>(i % 7);
  kiln::VMOptions o;
  o.runtime = kiln::Runtime::create();
  kiln::VirtualMachine vm(exe, o);
  auto requests = [] {
    for (const kiln::PoolStats& s : kiln::MemoryPools::processDefault().stats())
      if (s.device == kiln::Device{}) return s.hits + s.misses;
    return uint64_t(0);
  };
  uint64_t before = requests();
  Tensor r = vm.invoke("main", {Value(xs)}).tensor();
  CHECK(requests() - before < 10);
  for (int64_t c = 0; c < 4; ++c) {
    double want = 0;
    for (int64_t t = 0; t < 300; ++t) want += static_cast<float>((t * 4 + c) % 7);
    CHECK(r.data<float>()[c] == doctest::Approx(want));
  }
}
