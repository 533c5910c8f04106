// Fuzz target for running programs: bytes that compile as Relay text are run, on
// arguments made from @main's parameter types (`?` extents mostly 0 to 5, some 7
// to 33; values drawn from a generator seeded by the bytes: small integers for
// indices, floats with zeros, infinities and NaN among them), under a time limit
// and a memory limit. A run must finish or fail with a kiln::Error: never crash, hang,
// exhaust the machine or report an internal error. Programs whose @main takes a
// value this cannot make (a function, a reference, an ADT other than the
// prelude's List and Option) are compiled only.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

extern "C" const bool kiln_fuzz_odd_last_byte = false;

namespace {

constexpr int64_t kMaxElements = 1 << 16;  // per argument: larger ones are not made

double drawFloat(std::mt19937_64& rng) {
  switch (rng() % 16) {
    case 0: return 0.0;
    case 1: return -0.0;
    case 2: return std::numeric_limits<double>::infinity();
    case 3: return std::numeric_limits<double>::quiet_NaN();
    default: return std::uniform_real_distribution<double>(-4, 4)(rng);
  }
}

int64_t drawInt(std::mt19937_64& rng) {
  if (rng() % 32 == 0) return rng() % 2 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int32_t>::min();
  return static_cast<int64_t>(rng() % 12) - 3;  // -3 .. 8: in and out of small ranges
}

// The id of the prelude's constructor `name` of type `type` with `arity`
// fields, or -1 (a program may define its own List with other constructors).
int64_t preludeCtor(const kiln::Executable& exe, const char* name, const std::string& type, uint32_t arity) {
  int64_t id = exe.constructorId(name);
  if (id < 0) return -1;
  const kiln::ConstructorInfo& c = exe.constructors()[static_cast<size_t>(id)];
  return c.typeName == type && c.arity == arity ? id : -1;
}

// A value of type t, or nothing when this target cannot make one.
std::optional<kiln::Value> make(const kiln::Executable& exe, const kiln::TypeDesc& t, std::mt19937_64& rng) {
  using K = kiln::TypeDesc::Kind;
  // The prelude's List (0 to 4 cells) and Option; other ADTs' field types are
  // not in the executable.
  if (t.kind == K::Adt && t.fields.size() == 1 && (t.name == "List" || t.name == "Option")) {
    bool list = t.name == "List";
    int64_t some = preludeCtor(exe, list ? "Cons" : "Some", t.name, list ? 2 : 1);
    int64_t none = preludeCtor(exe, list ? "Nil" : "None", t.name, 0);
    if (some < 0 || none < 0) return std::nullopt;
    kiln::Value v = kiln::Value::adt(static_cast<uint32_t>(none), {});
    for (uint64_t n = list ? rng() % 5 : rng() % 2; n > 0; --n) {
      auto item = make(exe, t.fields[0], rng);
      if (!item) return std::nullopt;
      v = list ? kiln::Value::adt(static_cast<uint32_t>(some), {std::move(*item), std::move(v)})
               : kiln::Value::adt(static_cast<uint32_t>(some), {std::move(*item)});
    }
    return v;
  }
  if (t.kind == K::Tuple) {
    std::vector<kiln::Value> fields;
    for (const kiln::TypeDesc& f : t.fields) {
      auto v = make(exe, f, rng);
      if (!v) return std::nullopt;
      fields.push_back(std::move(*v));
    }
    return kiln::Value::tuple(std::move(fields));
  }
  if (t.kind != K::Tensor) return std::nullopt;
  bool isFloat = kiln::isFloat(t.dtype);
  if (t.shape.empty()) return isFloat ? kiln::Value::floatScalar(t.dtype, drawFloat(rng))
                                      : kiln::Value::intScalar(t.dtype, t.dtype == kiln::DType::Bool ? rng() % 2 : drawInt(rng));
  kiln::Shape shape;
  int64_t n = 1;
  for (int64_t d : t.shape) {
    // Mostly tiny, sometimes just past a vector's width or a tile's (the tails
    // of kernels' vector loops and masked edges).
    static constexpr int64_t kExtents[] = {0, 1, 2, 3, 4, 1, 2, 3, 5, 7, 15, 16, 17, 33};
    int64_t e = d < 0 ? kExtents[rng() % std::size(kExtents)] : d;
    if (e < 0 || (e > 0 && n > kMaxElements / e)) return std::nullopt;
    n *= e;
    shape.push_back(e);
  }
  kiln::Tensor x = kiln::Tensor::empty(t.dtype, shape);
  for (int64_t i = 0; i < n; ++i) {
    kiln::Value s = isFloat ? kiln::Value::floatScalar(t.dtype, drawFloat(rng))
                            : kiln::Value::intScalar(t.dtype, t.dtype == kiln::DType::Bool ? rng() % 2 : drawInt(rng));
    size_t bytes = kiln::dtypeSize(t.dtype);
    std::memcpy(static_cast<char*>(x.data()) + static_cast<size_t>(i) * bytes, s.tensor().data(), bytes);
  }
  return kiln::Value(x);
}

void failOnInternal(const kiln::Error& e) {
  // Bad input is the user's error, said as such; "internal" means Kiln's bug.
  if (std::string(e.what()).find("error: internal:") != std::string::npos) {
    std::fprintf(stderr, "internal error on fuzz input: %s\n", e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const kiln::Executable> exe;
  try {
    exe = kiln::compile(text, "fuzz.relay");
  } catch (const kiln::Error& e) {
    failOnInternal(e);
    return 0;
  }
  int64_t main = exe->functionIndex("main");
  if (main < 0) return 0;
  const kiln::BytecodeFunction& f = exe->functions()[static_cast<size_t>(main)];
  uint64_t seed = 1469598103934665603ull;  // FNV-1a of the bytes
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  std::mt19937_64 rng(seed);
  std::vector<kiln::Value> args;
  for (const kiln::TypeDesc& t : f.paramTypes) {
    auto v = make(*exe, t, rng);
    if (!v) return 0;
    args.push_back(std::move(*v));
  }
  static std::shared_ptr<kiln::Runtime> runtime = [] {
    kiln::RuntimeOptions o;
    o.numThreads = 2;  // forks and parallel loops too
    return kiln::Runtime::create(o);
  }();
  kiln::VMOptions o;
  o.runtime = runtime;
  o.timeLimit = std::chrono::milliseconds(200);
  o.memoryLimit = uint64_t(256) << 20;
  o.maxCallDepth = 20'000;
  try {
    kiln::VirtualMachine vm(exe, o);
    (void)vm.invoke("main", args);
  } catch (const kiln::Error& e) {
    failOnInternal(e);
  }
  return 0;
}
