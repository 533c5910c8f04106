// Partitioning: the pattern language (C++ and pattern files), the four passes,
// the TVM report's let-bound program, and errors.
#include <doctest/doctest.h>

#include <string>

#include "compiler/ir/printer.h"
#include "compiler/partition/dataflow.h"
#include "compiler/partition/merge_composite.h"
#include "compiler/partition/partition.h"
#include "compiler/pipeline.h"
#include "kiln/compile.h"
#include "kiln/vm.h"
#include "test_util.h"

namespace {

using namespace kiln;
using namespace kiln::partition;

// The first call of @main's body whose callee prints as `name` (in evaluation order).
const ir::Call* findCall(const ir::Module& m, const std::string& name, int nth = 0) {
  FunctionDataflow df(m.findFunction("main")->fn);
  for (const ir::Call* c : df.calls())
    if (ir::printExpr(c->callee) == name && nth-- == 0) return c;
  return nullptr;
}

// Matches at `c`, looking through @main's single-use bindings as the passes do.
bool matches(const PatternNode* p, const ir::Call* c, const ir::Module& m, PatternMatch* out = nullptr) {
  FunctionDataflow df(m.findFunction("main")->fn);
  int scope = df.scopeOf(c);
  VarResolver resolve = [&](const ir::Var* v) { return df.movable(v, scope); };
  std::function<bool(const ir::Expr*)> any = [](const ir::Expr*) { return true; };
  PatternMatch pm;
  bool ok = matchPattern(p, c, resolve, any, pm);
  if (out) *out = pm;
  return ok;
}

const char* kGraph = R"(
def @lib(%a: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] { %a }
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {
  %0 = add(%x, %x);
  %1 = add(%x, %y);
  %2 = nn.dense(%1, %w);
  %3 = nn.relu(%2);
  %4 = sum(%0, axis=[1], keepdims=True);
  %5 = @lib(%x, attrs_type_key="DictAttrs", tag="mine");
  %6 = (%3, %4);
  (%6.0, %5, 1f)
}
)";

}  // namespace

TEST_CASE("patterns: wildcards, shared nodes, operators, alternatives, optional, attributes, types and checks") {
  auto m = test::check(kGraph);
  PatternArena a;
  const ir::Call* addXX = findCall(*m, "add", 0);
  const ir::Call* addXY = findCall(*m, "add", 1);
  const ir::Call* relu = findCall(*m, "nn.relu");
  const ir::Call* sum = findCall(*m, "sum");
  const ir::Call* lib = findCall(*m, "@lib");
  REQUIRE((addXX && addXY && relu && sum && lib));

  // One wildcard node used twice must see one expression.
  const PatternNode* x = a.wildcard();
  CHECK(matches(a.opCall("add", {x, x}), addXX, *m));
  CHECK_FALSE(matches(a.opCall("add", {x, x}), addXY, *m));
  CHECK(matches(a.opCall("add", {a.wildcard(), a.wildcard()}), addXY, *m));
  CHECK_FALSE(matches(a.opCall("subtract", {a.wildcard(), a.wildcard()}), addXY, *m));

  // Nesting, inputs in evaluation order, interior calls in evaluation order.
  PatternMatch pm;
  REQUIRE(matches(a.opCall("nn.relu", {a.opCall("nn.dense", {a.opCall("add", {a.wildcard(), a.wildcard()}), a.wildcard()})}), relu, *m, &pm));
  REQUIRE(pm.inputs.size() == 3);
  CHECK(ir::printExpr(pm.inputs[0]) == "%x");
  CHECK(ir::printExpr(pm.inputs[2]) == "%w");
  CHECK(partitionedFromPattern(pm) == "add_nn.dense_nn.relu_");

  // A commutative operator's operands match in either order; inputs stay in evaluation order.
  const ir::Call* denseCall = findCall(*m, "nn.dense");
  REQUIRE(matches(a.opCall("nn.dense", {a.wildcard(), a.wildcard()}), denseCall, *m));
  PatternMatch swapped;
  REQUIRE(matches(a.opCall("add", {a.wildcard(), a.wildcard()}), addXY, *m, &swapped));
  auto m2 = test::check("def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) { add(tanh(%x), %y) }");
  PatternMatch pm2;
  REQUIRE(matches(a.opCall("add", {a.wildcard(), a.opCall("tanh", {a.wildcard()})}), findCall(*m2, "add"), *m2, &pm2));
  REQUIRE(pm2.inputs.size() == 2);
  CHECK(ir::printExpr(pm2.inputs[0]) == "%x");
  CHECK(ir::printExpr(pm2.inputs[1]) == "%y");
  CHECK_FALSE(matches(a.opCall("subtract", {a.wildcard(), a.opCall("tanh", {a.wildcard()})}), findCall(*m2, "add"), *m2));

  // Alternatives and optional operators.
  const PatternNode* dense = a.opCall("nn.dense", {a.wildcard(), a.wildcard()});
  const PatternNode* opt = a.optional(dense, [&](const PatternNode* p) { return a.opCall("nn.relu", {p}); });
  CHECK(matches(opt, relu, *m));
  CHECK(matches(opt, findCall(*m, "nn.dense"), *m));
  CHECK(matches(a.alt(a.opCall("tanh", {a.wildcard()}), a.opCall("nn.relu", {a.wildcard()})), relu, *m));

  // Operator attributes and call-site attributes of a function call.
  ops::AttrMap keep;
  keep.set("keepdims", ops::AttrValue::ofBool(true));
  CHECK(matches(a.hasAttrs(a.opCall("sum", {a.wildcard()}), keep), sum, *m));
  ops::AttrMap drop;
  drop.set("keepdims", ops::AttrValue::ofBool(false));
  CHECK_FALSE(matches(a.hasAttrs(a.opCall("sum", {a.wildcard()}), drop), sum, *m));
  ops::AttrMap tag;
  tag.set("tag", ops::AttrValue::ofString("mine"));
  CHECK(matches(a.hasAttrs(a.call(a.anyCallee(), {}, /*restArgs=*/true), tag), lib, *m));
  CHECK(matches(a.call(a.global("lib"), {a.wildcard()}), lib, *m));
  CHECK_FALSE(matches(a.call(a.global("other"), {a.wildcard()}), lib, *m));
  CHECK_FALSE(matches(a.call(a.anyCallee(), {a.wildcard()}), relu, *m));  // an operator is not a function

  // Types, shapes, dtypes and a C++ check.
  CHECK(matches(a.hasType(a.opCall("sum", {a.wildcard()}), DType::Float32, {2, 1}, true), sum, *m));
  CHECK_FALSE(matches(a.hasType(a.opCall("sum", {a.wildcard()}), DType::Float32, {2, 3}, true), sum, *m));
  CHECK(matches(a.hasType(a.opCall("sum", {a.wildcard()}), std::nullopt, {ops::kAnyDim, 1}, false), sum, *m));
  CHECK_FALSE(matches(a.hasType(a.opCall("sum", {a.wildcard()}), std::nullopt, {ops::kAnyDim, 1}, true), sum, *m));
  CHECK_FALSE(matches(a.hasDType(a.opCall("sum", {a.wildcard()}), DType::Float16), sum, *m));
  CHECK(matches(a.opCall("nn.dense", {a.hasType(a.wildcard(), DType::Float32, {2, 3}, true), a.wildcard()}), findCall(*m, "nn.dense"), *m));
  CHECK(matches(a.check(a.opCall("add", {a.wildcard(), a.wildcard()}), [](const ir::Expr* e) {
          return static_cast<const ir::Call*>(e)->args[0] == static_cast<const ir::Call*>(e)->args[1];
        }), addXX, *m));
  CHECK_FALSE(matches(a.check(a.opCall("add", {a.wildcard(), a.wildcard()}), [](const ir::Expr*) { return false; }), addXX, *m));
  CHECK_THROWS_WITH_AS(a.op("nn.nonsense"), doctest::Contains("no operator 'nn.nonsense'"), Error);
}

TEST_CASE("patterns: tuples and projections, through graph bindings") {
  auto m = test::check(kGraph);
  PatternArena a;
  FunctionDataflow df(m->findFunction("main")->fn);
  // The body's final tuple: (%6.0, %5, 1f) where %6 = (%3, %4).
  const ir::Expr* body = m->findFunction("main")->fn->body;
  while (body->kind == ir::ExprKind::Let) body = static_cast<const ir::Let*>(body)->body;
  REQUIRE(body->kind == ir::ExprKind::Tuple);
  const ir::Expr* proj = static_cast<const ir::Tuple*>(body)->fields[0];
  int scope = df.scopeOf(proj);
  VarResolver resolve = [&](const ir::Var* v) { return df.movable(v, scope); };
  std::function<bool(const ir::Expr*)> any = [](const ir::Expr*) { return true; };
  PatternMatch pm;
  const PatternNode* p = a.tupleGet(a.tuple({a.opCall("nn.relu", {a.wildcard()}), a.wildcard()}), 0);
  REQUIRE(matchPattern(p, proj, resolve, any, pm));
  CHECK(pm.absorbed.size() == 2);  // %6 and %3, each used once
  CHECK(matchPattern(a.tupleGet(a.wildcard(), -1), proj, resolve, any, pm));
  CHECK_FALSE(matchPattern(a.tupleGet(a.wildcard(), 1), proj, resolve, any, pm));
  // Without looking through variables, %6 is just a variable.
  CHECK_FALSE(matchPattern(p, proj, nullptr, any, pm));
}

TEST_CASE("pattern files: every construct, and errors at file:line:col") {
  PatternTable t = parsePatternTable(R"(# a comment
let dense = nn.dense(*, *)
composite dnnl.dense_bias_relu = nn.relu?(add?(dense, *)) # trailing comment
composite dnnl.conv = nn.conv2d(*, *) [attr kernel_layout="OIHW", groups=1]
  | nn.conv2d(*, *) [shape (1, ?, ?, ?)] [dtype float32]
supports dnnl = tanh(*) | sigmoid(*) [type Tensor[(1, 4), float32]]
supports mine = _(...) [attr match_key="my_library"]
supports mine = @g(*, ...) | (*, const) | (*,).0
)", "p.pat");
  CHECK(t.composites.size() == 2);
  CHECK(t.composites[0].name == "dnnl.dense_bias_relu");
  CHECK(t.supports.size() == 3);
  CHECK(t.libraries() == std::vector<std::string>{"dnnl", "mine"});
  CHECK(t.composites[1].pattern->kind == PatKind::Alt);

  auto err = [](const char* text) {
    try {
      parsePatternTable(text, "p.pat");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err("composite dnnl.x = nn.nope(*)") == "p.pat:1:20: error: pattern: there is no operator 'nn.nope'");
  CHECK(err("\ncomposite x = tanh(*)") == "p.pat:2:11: error: a composite is named library.name (as dnnl.conv2d_relu), not 'x'");
  CHECK(err("supports a = tanh(*) tanh(*)") == "p.pat:1:22: error: expected the end of the line after the pattern");
  CHECK(err("supports a = tanh(*) [attr k=\"v]") == "p.pat:1:30: error: unterminated string");
  CHECK(err("supports a = conv") == "p.pat:1:14: error: 'conv' is not a pattern defined with let (an operator needs its operands)");
  CHECK(err("supports a = tanh(*) [size 3]") == "p.pat:1:23: error: expected 'attr', 'type', 'shape' or 'dtype', found 'size'");
  CHECK(err("supports a = tanh(*) [dtype float33]") == "p.pat:1:29: error: 'float33' is not a dtype");
  CHECK(err("pattern a = tanh(*)") == "p.pat:1:1: error: expected 'composite', 'supports' or 'let', found 'pattern'");
  CHECK(err("let a = *\nlet a = *") == "p.pat:2:5: error: pattern 'a' is defined twice");
  CHECK(err("supports a = tanh(*") == "p.pat:1:20: error: expected ')'");
  // A pattern may continue over lines inside brackets.
  CHECK(err("supports a = add(*,\n  *)") == "");
}

namespace {

// Runs `src` through the compiler with `libs` and the pattern file text `patterns`.
compiler::Stages partitioned(const std::string& src, std::vector<std::string> libs, const std::string& patterns) {
  CompileOptions o;
  o.partition = std::move(libs);
  o.partitionPatterns = {{"t.pat", patterns}};
  return compiler::runPasses(src, "t.relay", o);
}

std::vector<std::string> compilerFunctions(const ir::Module& m) {
  std::vector<std::string> out;
  for (const ir::GlobalFunction& g : m.functions()) {
    CHECK_MESSAGE(freeVariables(g.fn).empty(), "free variables in @" << g.var->name);
    if (g.fn->attrs && g.fn->attrs->find("Compiler")) out.push_back(std::string(g.var->name));
  }
  return out;
}

Tensor filled(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + 0.25f * static_cast<float>(i % 7) - 0.5f;
  return t;
}

std::string runMain(const compiler::Stages& s, std::vector<Value> args) {
  auto exe = compiler::emit(s, {});
  VirtualMachine vm(exe);
  return exe->format(vm.invoke("main", args));
}

// TVM's report: two library calls tagged with a call attribute, bound by lets
// with an unrelated let between them.
const char* kLetProgram = R"(
def @my_conv(%x: Tensor[(1, 4), float32], %w: Tensor[(4, 4), float32]) -> Tensor[(1, 4), float32] {
  nn.relu(nn.dense(%x, %w))
}
def @main(%a: Tensor[(1, 4), float32], %w: Tensor[(4, 4), float32]) -> Tensor[(1, 4), float32] {
  let %x = @my_conv(%a, %w, attrs_type_key="DictAttrs", match_key="my_library");
  let %y = 0;
  let %z = @my_conv(%x, %w, attrs_type_key="DictAttrs", match_key="my_library");
  %z
}
)";

}  // namespace

TEST_CASE("partition: the let-bound program of TVM's report becomes two library functions without free variables, and runs") {
  compiler::Stages s = partitioned(kLetProgram, {"my_library"}, "supports my_library = _(...) [attr match_key=\"my_library\"]\n");
  CHECK(s.regions.regions.size() == 2);
  CHECK(compilerFunctions(*s.partitioned) == std::vector<std::string>{"my_library_main_0", "my_library_main_1"});
  std::string text = ir::printModule(*s.partitioned);
  // The lets stay in @main, binding the library functions' results.
  CHECK(text.find("let %x = @my_library_main_0(%a, %w);") != std::string::npos);
  CHECK(text.find("let %y = 0;") != std::string::npos);
  CHECK(text.find("let %z = @my_library_main_1(%x, %w);") != std::string::npos);
  CHECK(text.find("def @my_library_main_1(%x: Tensor[(1, 4), float32], %w: Tensor[(4, 4), float32], Primitive=1, "
                  "Compiler=\"my_library\", global_symbol=\"my_library_main_1\")") != std::string::npos);
  // The printed program parses and type-checks again.
  CHECK_NOTHROW(test::check(text));
  std::vector<Value> args{Value(filled({1, 4}, 1)), Value(filled({4, 4}, 0.25f))};
  std::string want = runMain(compiler::runPasses(kLetProgram, "t.relay", {}), args);
  CHECK(runMain(s, args) == want);
  CHECK(want != "");
}

TEST_CASE("partition: composites and regions are the same for a graph and its let (ANF) form, and respect uses and scopes") {
  const char* graph = R"(
def @main(%x: Tensor[(1, 8), float32], %w1: Tensor[(8, 8), float32], %b: Tensor[(8), float32], %w2: Tensor[(4, 8), float32]) {
  %0 = nn.dense(%x, %w1);
  %1 = add(%0, %b);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w2);
  %4 = tanh(%3);
  sigmoid(%4)
}
)";
  const char* lets = R"(
def @main(%x: Tensor[(1, 8), float32], %w1: Tensor[(8, 8), float32], %b: Tensor[(8), float32], %w2: Tensor[(4, 8), float32]) {
  let %a = nn.dense(%x, %w1);
  let %c = nn.relu(add(%a, %b));
  let %d = nn.dense(%c, %w2);
  let %e = tanh(%d);
  sigmoid(%e)
}
)";
  const char* pats = "composite lib.dense_bias_relu = nn.relu?(add?(nn.dense(*, *), *))\nsupports lib = tanh(*) | sigmoid(*)\n";
  std::vector<Value> args{Value(filled({1, 8}, 0.5f)), Value(filled({8, 8}, -0.1f)), Value(filled({8}, 0.2f)), Value(filled({4, 8}, 0.3f))};
  std::string want = runMain(compiler::runPasses(graph, "t.relay", {}), args);
  for (const char* src : {graph, lets}) {
    CAPTURE(src);
    compiler::Stages s = partitioned(src, {"lib"}, pats);
    // Two composites (dense+add+relu, dense alone) and the two activations: one region.
    std::string comp = ir::printModule(*s.composite);
    CHECK(comp.find("PartitionedFromPattern=\"nn.dense_add_nn.relu_\"") != std::string::npos);
    CHECK(comp.find("PartitionedFromPattern=\"nn.dense_\"") != std::string::npos);
    CHECK(s.regions.regions.size() == 1);
    CHECK(s.regions.regions[0].members.size() == 4);
    CHECK(compilerFunctions(*s.partitioned) == std::vector<std::string>{"lib_main_0"});
    CHECK_NOTHROW(test::check(ir::printModule(*s.partitioned)));
    CHECK(runMain(s, args) == want);
  }

  // A value also used elsewhere is never swallowed: %1 feeds the relu and the result.
  const char* shared = R"(
def @main(%x: Tensor[(1, 8), float32], %w1: Tensor[(8, 8), float32], %b: Tensor[(8), float32]) {
  %0 = nn.dense(%x, %w1);
  %1 = add(%0, %b);
  %2 = nn.relu(%1);
  (%2, %1)
}
)";
  compiler::Stages s = partitioned(shared, {"lib"}, pats);
  std::string comp = ir::printModule(*s.composite);
  CHECK(comp.find("PartitionedFromPattern=\"nn.dense_add_\"") != std::string::npos);
  CHECK(comp.find("%2 = nn.relu(%1)") != std::string::npos);

  // A value every use of which is inside the region belongs to it (a diamond, a
  // residual connection), computed once: a graph binding in the region's body.
  const char* diamond = R"(
def @main(%x: Tensor[(4), float32]) {
  let %a = tanh(%x);
  %1 = sigmoid(%a);
  %2 = nn.relu(%a);
  add(%1, %2)
}
)";
  s = partitioned(diamond, {"lib"}, "supports lib = tanh(*) | sigmoid(*) | nn.relu(*) | add(*, *)\n");
  REQUIRE(s.regions.regions.size() == 1);
  CHECK(s.regions.regions[0].members.size() == 4);
  std::string text = ir::printModule(*s.partitioned);
  CHECK(text.find("  %0 = tanh(%x);\n  add(sigmoid(%0), nn.relu(%0))") != std::string::npos);
  CHECK_NOTHROW(test::check(text));
  std::vector<Value> one{Value(filled({4}, 0.3f))};
  CHECK(runMain(s, one) == runMain(compiler::runPasses(diamond, "t.relay", {}), one));
  // Used outside too, it stays the region's input: the result also returns %a.
  s = partitioned("def @main(%x: Tensor[(4), float32]) { let %a = tanh(%x); (add(sigmoid(%a), %a), %a) }", {"lib"},
                  "supports lib = tanh(*) | sigmoid(*) | add(*, *)\n");
  CHECK(s.regions.regions.size() == 2);

  // A region never crosses a branch: the tanh before the `if` and the sigmoid inside it are two regions.
  const char* branch = R"(
def @main(%x: Tensor[(4), float32], %c: bool) {
  let %t = tanh(%x);
  if (%c) { sigmoid(%t) } else { %x }
}
)";
  s = partitioned(branch, {"lib"}, pats);
  CHECK(s.regions.regions.size() == 2);
}

TEST_CASE("partition: libraries in order of preference, polymorphic code noted, unknown libraries refused") {
  const char* src = R"(
def @id[A](%v: A) -> A { %v }
def @main(%x: Tensor[(4), float32]) {
  %0 = tanh(%x);
  %1 = sigmoid(%0);
  @id(%1)
}
)";
  const char* pats = "supports first = tanh(*)\nsupports second = tanh(*) | sigmoid(*)\n";
  compiler::Stages s = partitioned(src, {"first", "second"}, pats);
  REQUIRE(s.regions.regions.size() == 2);
  CHECK(s.regions.regions[0].library == "first");
  CHECK(s.regions.regions[1].library == "second");
  s = partitioned(src, {"second", "first"}, pats);
  REQUIRE(s.regions.regions.size() == 1);
  CHECK(s.regions.regions[0].members.size() == 2);

  // @id's body is polymorphic: a call there is never a library function.
  const char* poly = R"(
def @twice[A](%f: fn (A) -> A, %v: A) -> A { %f(%f(%v)) }
def @main(%x: Tensor[(4), float32]) { @twice(fn (%y: Tensor[(4), float32]) { tanh(%y) }, %x) }
)";
  s = partitioned(poly, {"lib"}, "supports lib = _(...)\n");
  // Only @twice's call in @main (its type is concrete there) is taken.
  REQUIRE(s.regions.regions.size() == 1);
  CHECK(s.regions.regions[0].function == "main");
  CHECK_NOTHROW(test::check(ir::printModule(*s.partitioned)));
  CHECK(!s.partitionNotes.empty());
  CHECK(s.partitionNotes.back().find("runs on Kiln's kernels") != std::string::npos);

  CHECK_THROWS_WITH_AS(partitioned(src, {"dnnl2"}, pats),
                       doctest::Contains("partition: no patterns name the library 'dnnl2'"), Error);
  CHECK_THROWS_WITH_AS(partitioned(src, {"lib"}, "supports lib = tanh(*"), doctest::Contains("t.pat:1:22: error: expected ')'"), Error);
}
