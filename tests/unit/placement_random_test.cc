// Device placement under random annotation: one program with nine places where
// an `on_device` to cpu or cpu:1 may stand (around tensors, a branch condition
// and a literal), compiled with 400 seeded choices for each device list. Every
// variant must run (no kernel is ever handed a tensor on another device) and give
// the unannotated program's result.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "kiln/compile.h"
#include "kiln/vm.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Tensor;
using kiln::Value;

// `<k|e|k>` marks annotation point k around expression e.
const char* kTemplate = R"(
def @scale(%x: Tensor[(4), float32], %s: float32) -> Tensor[(4), float32] { <0|%x * %s|0> }
def @sum_list(%l: List[Tensor[(4), float32]]) -> Tensor[(4), float32] {
  match (%l) { Cons(%h, %t) => <1|%h + @sum_list(%t)|1>, Nil => zeros(shape=[4], dtype="float32") }
}
def @main(%a: Tensor[(4), float32], %b: Tensor[(4), float32], %n: int32) -> Tensor[(4), float32] {
  let %c = <2|%a + %b|2>;
  let %f = fn (%y: Tensor[(4), float32]) -> Tensor[(4), float32] { <3|%y * %c|3> };
  let %l = @map(%f, Cons(%a, Cons(<4|%b|4>, Nil)));
  let %s = @sum_list(%l);
  let %d = if (<7|%n > 0|7>) { <5|@scale(%s, <8|2f|8>)|5> } else { @scale(%c, 3f) };
  <6|%d - %c|6>
}
)";
constexpr int kPoints = 9;

// choice[k]: 0 plain, 1 on cpu, 2 on cpu:1.
std::string instantiate(const std::vector<int>& choice) {
  std::string s = kTemplate;
  for (int k = 0; k < kPoints; ++k) {
    std::string open = "<" + std::to_string(k) + "|", close = "|" + std::to_string(k) + ">";
    size_t a = s.find(open), b = s.find(close);
    REQUIRE(a != std::string::npos);
    REQUIRE(b != std::string::npos);
    std::string e = s.substr(a + open.size(), b - a - open.size());
    std::string r = choice[static_cast<size_t>(k)] == 0 ? e
                    : "on_device(" + e + ", device=\"" + (choice[static_cast<size_t>(k)] == 1 ? "cpu" : "cpu:1") + "\")";
    s = s.substr(0, a) + r + s.substr(b + close.size());
  }
  return s;
}

Tensor vec(std::initializer_list<float> v) {
  Tensor t = Tensor::empty(DType::Float32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

std::string run(const std::string& src, std::vector<Device> devices, int n, size_t* copies = nullptr) {
  kiln::CompileOptions o;
  o.devices = std::move(devices);
  if (copies) *copies = kiln::compiler::runPasses(src, "random.relay", o).placed.copies.size();
  auto exe = kiln::compile(src, "random.relay", o);
  kiln::VirtualMachine vm(exe);
  return exe->format(vm.invoke("main", {Value(vec({1, 2, 3, 4})), Value(vec({5, 6, 7, 8})), Value::intScalar(DType::Int32, n)}));
}

}  // namespace

TEST_CASE("placement: 400 random on_device annotations of one program all run and agree with the plain program") {
  const Device cpu{}, cpu1{Device::Kind::CPU, 1};
  std::string plain = instantiate(std::vector<int>(kPoints, 0));
  std::string want[2] = {run(plain, {cpu}, 1), run(plain, {cpu}, 0)};
  CHECK(want[0] == "4xf32=[66 120 190 276]");
  CHECK(want[1] == "4xf32=[12 16 20 24]");
  uint64_t state = 0x9e3779b97f4a7c15ull;
  size_t withCopies = 0;
  for (int variant = 0; variant < 400; ++variant) {
    std::vector<int> choice;
    for (int k = 0; k < kPoints; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      choice.push_back(static_cast<int>((state >> 33) % 3));
    }
    std::string src = instantiate(choice);
    CAPTURE(src);
    for (const auto& devices : {std::vector<Device>{cpu}, std::vector<Device>{cpu1, cpu}}) {
      size_t copies = 0;
      CHECK(run(src, devices, 1, &copies) == want[0]);
      CHECK(run(src, devices, 0) == want[1]);
      withCopies += copies > 0;
    }
  }
  // The annotations really do make placement insert copies in most variants.
  CHECK(withCopies > 400);
}
