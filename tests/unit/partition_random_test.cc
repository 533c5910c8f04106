// Partitioning, as a property: generated programs (graph bindings, let chains,
// nested expressions; `if`, `match` over lists, closures, a recursive global)
// partitioned with random supported sets and composite patterns. Every result
// has no free variable in any function, prints to text that type-checks, and
// computes bit for bit what the unpartitioned program computes. The same
// programs partitioned for oneDNN compute the same values within float tolerance.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_skip.h"
#include "compiler/ir/printer.h"
#include "compiler/partition/dataflow.h"
#include "compiler/pipeline.h"
#include "kernel_ir/library_support.h"
#include "kiln/compile.h"
#include "kiln/vm.h"
#include "test_util.h"

namespace {

using namespace kiln;

struct Rng {
  uint64_t s;
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint32_t>(n)); }
  bool chance(int percent) { return below(100) < percent; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<size_t>(below(static_cast<int>(v.size())))]; }
};

const char* kT = "Tensor[(2, 4), float32]";
const std::vector<std::string> kUnary = {"tanh", "sigmoid", "nn.relu", "negative", "abs"};
const std::vector<std::string> kBinary = {"add", "subtract", "multiply", "maximum"};

// Programs over tensors of one type T = 2x4 float32 (and %w: 4x4 for nn.dense).
class ProgramGen {
 public:
  explicit ProgramGen(uint64_t seed) : r_{seed} {}

  std::string program() {
    style_ = r_.below(3);  // 0: graph bindings, 1: let chains (A-normal), 2: nested expressions
    std::string loop = "def @loop(%i: int32, %acc: " + std::string(kT) + ", %w: Tensor[(4, 4), float32]) -> " + kT + " {\n" +
                       "  if (%i > 0) {\n" + block({"%acc"}, 1, "    ", "@loop(%i - 1, $, %w)") + "\n  } else {\n    %acc\n  }\n}\n";
    std::string main = "def @main(%x: " + std::string(kT) + ", %y: " + kT + ", %w: Tensor[(4, 4), float32]) -> " + kT + " {\n" +
                       block({"%x", "%y"}, 0, "  ", "$") + "\n}\n";
    return loop + main;
  }
  int style() const { return style_; }

 private:
  std::string fresh(const char* prefix) { return prefix + std::to_string(counter_++); }

  // A tensor expression over `scope`; `depth` bounds control flow and nesting.
  std::string expr(std::vector<std::string>& scope, int depth, const std::string& indent, std::string& bindings) {
    int k = r_.below(depth < 2 ? 100 : 60);
    if (k < 30) return r_.pick(kUnary) + "(" + atom(scope, depth, indent, bindings) + ")";
    if (k < 52) return r_.pick(kBinary) + "(" + atom(scope, depth, indent, bindings) + ", " + atom(scope, depth, indent, bindings) + ")";
    if (k < 60) return "nn.dense(" + atom(scope, depth, indent, bindings) + ", %w)";
    if (k < 70) {
      std::string c = atom(scope, depth, indent, bindings);
      return "if (sum(" + c + ") > 0f) {\n" + block(scope, depth + 1, indent + "  ", "$") + "\n" + indent + "} else {\n" +
             block(scope, depth + 1, indent + "  ", "$") + "\n" + indent + "}";
    }
    if (k < 80) {
      std::string h = fresh("%h"), t = fresh("%t");
      std::string a = atom(scope, depth, indent, bindings), b = atom(scope, depth, indent, bindings);
      std::vector<std::string> inner = scope;
      inner.push_back(h);
      return "match (Cons(" + a + ", Cons(" + b + ", Nil))) {\n" + indent + "  Cons(" + h + ", " + t + ") => {\n" +
             block(inner, depth + 1, indent + "    ", "$") + "\n" + indent + "  },\n" + indent + "  Nil => " + a + ",\n" + indent + "}";
    }
    if (k < 88) {
      // A closure capturing the scope, bound by a let, then called (or mapped over a list).
      std::string f = fresh("%f"), p = fresh("%p");
      std::vector<std::string> inner = scope;
      inner.push_back(p);
      bindings += indent + "let " + f + " = fn (" + p + ": " + kT + ") -> " + kT + " {\n" + block(inner, depth + 1, indent + "  ", "$") +
                  "\n" + indent + "};\n";
      std::string a = atom(scope, depth, indent, bindings);
      if (r_.chance(50)) return f + "(" + a + ")";
      std::string h = fresh("%m"), t = fresh("%r");
      return "match (@map(" + f + ", Cons(" + a + ", Nil))) { Cons(" + h + ", " + t + ") => " + h + ", Nil => " + a + " }";
    }
    if (depth > 0) return r_.pick(kUnary) + "(" + atom(scope, depth, indent, bindings) + ")";
    return "@loop(" + std::to_string(1 + r_.below(3)) + ", " + atom(scope, depth, indent, bindings) + ", %w)";
  }

  // An operand: a variable in scope, or in the nested style sometimes an expression.
  std::string atom(std::vector<std::string>& scope, int depth, const std::string& indent, std::string& bindings) {
    if (style_ == 2 && depth < 3 && r_.chance(35)) {
      std::string e = r_.chance(50) ? r_.pick(kUnary) + "(" + r_.pick(scope) + ")"
                                    : r_.pick(kBinary) + "(" + r_.pick(scope) + ", " + r_.pick(scope) + ")";
      return e;
    }
    return r_.pick(scope);
  }

  // Bindings then a final expression; `wrap` with `$` replaced by the last value.
  std::string block(std::vector<std::string> scope, int depth, const std::string& indent, const std::string& wrap) {
    std::string out;
    int n = depth == 0 ? 3 + r_.below(6) : 1 + r_.below(4);
    std::string last;
    for (int i = 0; i < n; ++i) {
      std::string bindings;
      std::string e = expr(scope, depth, indent, bindings);
      out += bindings;
      std::string v = style_ == 0 ? "%" + std::to_string(counter_++) : fresh("%v");
      out += indent + (style_ == 0 ? "" : "let ") + v + " = " + e + ";\n";
      scope.push_back(v);
      last = v;
    }
    std::string result = r_.chance(50) ? last : r_.pick(kBinary) + "(" + last + ", " + r_.pick(scope) + ")";
    std::string w = wrap;
    w.replace(w.find('$'), 1, result);
    return out + indent + w;
  }

  Rng r_;
  int style_ = 0;
  int counter_ = 0;
};

// A random partitioning: one or two libraries, each supporting a random subset
// of the operators (and perhaps every function call), with composite patterns.
std::string patternFile(Rng& r, std::vector<std::string>& libs) {
  libs = r.chance(50) ? std::vector<std::string>{"liba"} : std::vector<std::string>{"liba", "libb"};
  std::vector<std::string> ops = kUnary;
  ops.insert(ops.end(), kBinary.begin(), kBinary.end());
  ops.push_back("nn.dense");
  std::string text;
  for (const std::string& lib : libs) {
    std::string alts;
    for (const std::string& op : ops)
      if (r.chance(45)) alts += std::string(alts.empty() ? "" : " | ") + op + (op == "nn.dense" || op == kBinary[0] || op == kBinary[1] || op == kBinary[2] || op == kBinary[3] ? "(*, *)" : "(*)");
    if (r.chance(25)) alts += std::string(alts.empty() ? "" : " | ") + "_(...)";
    if (!alts.empty()) text += "supports " + lib + " = " + alts + "\n";
    if (r.chance(50)) text += "composite " + lib + ".dense_act = " + r.pick(kUnary) + "?(add?(nn.dense(*, *), *))\n";
    if (r.chance(40)) text += "composite " + lib + ".gate = " + r.pick(kUnary) + "(" + r.pick(kBinary) + "(*, *))\n";
    if (text.find(lib) == std::string::npos) text += "supports " + lib + " = tanh(*)\n";
  }
  return text;
}

Tensor input(int k) {
  Tensor t = Tensor::empty(DType::Float32, {2, 4});
  for (int i = 0; i < 8; ++i) t.data<float>()[i] = 0.37f * static_cast<float>((i * 5 + k * 3) % 9) - 1.3f;
  return t;
}

Tensor weights() {
  Tensor t = Tensor::empty(DType::Float32, {4, 4});
  for (int i = 0; i < 16; ++i) t.data<float>()[i] = 0.11f * static_cast<float>((i * 7) % 11) - 0.5f;
  return t;
}

Tensor run(const compiler::Stages& s) {
  auto exe = compiler::emit(s, {});
  VirtualMachine vm(exe);
  Value v = vm.invoke("main", {Value(input(0)), Value(input(1)), Value(weights())});
  REQUIRE(v.isTensor());
  return v.tensor();
}

}  // namespace

TEST_CASE("partition: 240 generated programs, randomly partitioned, have no free variables, type-check and compute the same bits") {
  Rng r{0x5eed1234abcdull};
  int regions = 0, withLibraryCalls = 0, throughLets = 0, styles[3] = {0, 0, 0};
  for (int n = 0; n < 240; ++n) {
    ProgramGen gen(r.next() * 2654435761ull + static_cast<uint64_t>(n));
    std::string src = gen.program();
    std::vector<std::string> libs;
    std::string pats = patternFile(r, libs);
    CAPTURE(src);
    CAPTURE(pats);
    ++styles[gen.style()];
    compiler::Stages plain = compiler::runPasses(src, "gen.relay", {});
    CompileOptions o;
    o.partition = libs;
    o.partitionPatterns = {{"gen.pat", pats}};
    compiler::Stages part = compiler::runPasses(src, "gen.relay", o);
    for (const ir::GlobalFunction& g : part.partitioned->functions()) {
      std::vector<const ir::Var*> free = partition::freeVariables(g.fn);
      CHECK_MESSAGE(free.empty(), "@" << g.var->name << " uses %" << (free.empty() ? "" : free[0]->name) << " freely");
    }
    std::string text = ir::printModule(*part.partitioned);
    CAPTURE(text);
    CHECK_NOTHROW(test::check(text));
    regions += static_cast<int>(part.regions.regions.size());
    withLibraryCalls += !part.regions.regions.empty();
    throughLets += !part.regions.absorbed.empty();
    Tensor want = run(plain), got = run(part);
    REQUIRE(want.nbytes() == got.nbytes());
    CHECK(std::memcmp(want.data<float>(), got.data<float>(), want.nbytes()) == 0);
  }
  // The generator really exercises what the property is about.
  CHECK(regions > 400);
  CHECK(withLibraryCalls > 200);
  CHECK(throughLets > 40);
  CHECK(styles[0] > 50);
  CHECK(styles[1] > 50);
  CHECK(styles[2] > 50);
}

TEST_CASE("partition: 120 generated programs partitioned for oneDNN compute what Kiln computes (float tolerance)") {
  if (!kernel_ir::findLibrary("dnnl")->available) return kiln::test::skip("Kiln is built without oneDNN");
  Rng r{0xd11dull};
  int libraryKernels = 0;
  for (int n = 0; n < 120; ++n) {
    ProgramGen gen(r.next() * 2654435761ull + static_cast<uint64_t>(n));
    std::string src = gen.program();
    CAPTURE(src);
    CompileOptions o;
    o.partition = {"dnnl"};
    compiler::Stages part = compiler::runPasses(src, "gen.relay", o);
    auto exe = compiler::emit(part, o);
    for (const KernelInfo& k : exe->kernels()) libraryKernels += k.function->library == "dnnl";
    Tensor want = run(compiler::runPasses(src, "gen.relay", {})), got = run(part);
    REQUIRE(want.nbytes() == got.nbytes());
    for (int64_t i = 0; i < want.numel(); ++i) {
      float w = want.data<float>()[i], g = got.data<float>()[i];
      CHECK_MESSAGE(std::fabs(w - g) <= 1e-4f * (1.0f + std::fabs(w)), "element " << i << ": " << g << " vs " << w);
    }
  }
  CHECK(libraryKernels > 100);
}
