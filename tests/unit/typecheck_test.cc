// Type inference: operator rules, `?` dimensions, polymorphism, closures,
// recursion, ADTs and exhaustiveness, each checked against the exact type.
#include "test_util.h"

#include <algorithm>
#include <string>

#include "compiler/parser/prelude.h"
#include "compiler/parser/prelude_filter.h"

using kiln::test::mainResult;

namespace {
std::string unary(const std::string& type, const std::string& body) {
  return "def @main(%x: " + type + ") { " + body + " }";
}
}  // namespace

TEST_CASE("element-wise operators broadcast like numpy, ? included") {
  CHECK(mainResult("def @main(%a: Tensor[(2, 1, 4), float32], %b: Tensor[(3, 1), float32]) { add(%a, %b) }") ==
        "Tensor[(2, 3, 4), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(?, 4), float32], %b: Tensor[(4,), float32]) { %a * %b }") ==
        "Tensor[(?, 4), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(?, 1), float32], %b: Tensor[(1, 5), float32]) { %a - %b }") ==
        "Tensor[(?, 5), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(?,), float32], %b: Tensor[(7,), float32]) { %a / %b }") ==
        "Tensor[(7,), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(2, 3), int32]) { %a < 3 }") == "Tensor[(2, 3), bool]");
  CHECK(mainResult("def @main(%a: Tensor[(2, 3), bool], %b: bool) { logical_and(%a, %b) }") ==
        "Tensor[(2, 3), bool]");
  CHECK(mainResult("def @main(%c: Tensor[(2, 1), bool], %x: Tensor[(3,), float32], %y: float32) { where(%c, %x, %y) }") ==
        "Tensor[(2, 3), float32]");
  CHECK(mainResult(unary("Tensor[(2, ?), float16]", "sigmoid(%x)")) == "Tensor[(2, ?), float16]");
  CHECK(mainResult(unary("Tensor[(2, 3), float32]", "cast(%x, dtype=\"int64\")")) == "Tensor[(2, 3), int64]");
  CHECK(mainResult(unary("Tensor[(5,), float32]", "clip(%x, a_min=0f, a_max=6f)")) == "Tensor[(5,), float32]");
  CHECK(mainResult(unary("Tensor[(5,), float32]", "-%x")) == "Tensor[(5,), float32]");
}

TEST_CASE("reductions honour axis, keepdims and exclude") {
  std::string t = "Tensor[(2, 3, 4), float32]";
  CHECK(mainResult(unary(t, "sum(%x)")) == "float32");
  CHECK(mainResult(unary(t, "sum(%x, axis=[1])")) == "Tensor[(2, 4), float32]");
  CHECK(mainResult(unary(t, "mean(%x, axis=[-1], keepdims=True)")) == "Tensor[(2, 3, 1), float32]");
  CHECK(mainResult(unary(t, "max(%x, axis=[1], exclude=True)")) == "Tensor[(3,), float32]");
  CHECK(mainResult(unary(t, "argmax(%x, axis=[2])")) == "Tensor[(2, 3), int32]");
  CHECK(mainResult(unary("Tensor[(2, 3), bool]", "all(%x, axis=0)")) == "Tensor[(3,), bool]");
  CHECK(mainResult(unary(t, "cumsum(%x, axis=1)")) == "Tensor[(2, 3, 4), float32]");
  CHECK(mainResult(unary(t, "cumsum(%x)")) == "Tensor[(24,), float32]");
  CHECK(mainResult(unary("Tensor[(?, 3), float32]", "cumsum(%x, dtype=\"float64\")")) == "Tensor[(?,), float64]");
}

TEST_CASE("dense, matmul and batch_matmul shape rules") {
  CHECK(mainResult("def @main(%x: Tensor[(?, 8, 16), float32], %w: Tensor[(32, 16), float32]) { nn.dense(%x, %w, units=32) }") ==
        "Tensor[(?, 8, 32), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(4, 5), float32], %b: Tensor[(5, 6), float32]) { nn.matmul(%a, %b) }") ==
        "Tensor[(4, 6), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(5, 4), float32], %b: Tensor[(6, 5), float32]) { nn.matmul(%a, %b, transpose_a=True, transpose_b=True) }") ==
        "Tensor[(4, 6), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(1, 3, 4), float32], %b: Tensor[(7, 5, 4), float32]) { nn.batch_matmul(%a, %b) }") ==
        "Tensor[(7, 3, 5), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(2, 3, 4), float32], %b: Tensor[(2, 4, 5), float32]) { nn.batch_matmul(%a, %b, transpose_b=False) }") ==
        "Tensor[(2, 3, 5), float32]");
}

TEST_CASE("conv2d and pooling shape rules") {
  CHECK(mainResult("def @main(%x: Tensor[(1, 64, 56, 56), float32], %w: Tensor[(64, 64, 3, 3), float32]) {"
                   " nn.conv2d(%x, %w, padding=[1, 1], channels=64, kernel_size=[3, 3]) }") ==
        "Tensor[(1, 64, 56, 56), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(?, 3, 224, 224), float32], %w: Tensor[(16, 3, 7, 7), float32]) {"
                   " nn.conv2d(%x, %w, strides=[2, 2], padding=[3, 3, 3, 3]) }") ==
        "Tensor[(?, 16, 112, 112), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(1, 8, 10, 10), float32], %w: Tensor[(8, 1, 3, 3), float32]) {"
                   " nn.conv2d(%x, %w, groups=8, dilation=[2, 2]) }") ==
        "Tensor[(1, 8, 6, 6), float32]");
  CHECK(mainResult(unary("Tensor[(1, 4, 9, 9), float32]", "nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2])")) ==
        "Tensor[(1, 4, 4, 4), float32]");
  CHECK(mainResult(unary("Tensor[(1, 4, 9, 9), float32]", "nn.avg_pool2d(%x, pool_size=[2, 2], strides=[2, 2], ceil_mode=True)")) ==
        "Tensor[(1, 4, 5, 5), float32]");
  CHECK(mainResult(unary("Tensor[(2, 4, 9, 9), float32]", "nn.global_avg_pool2d(%x)")) == "Tensor[(2, 4, 1, 1), float32]");
}

TEST_CASE("nn operators keep their input's type") {
  CHECK(mainResult("def @main(%x: Tensor[(2, 5), float32], %b: Tensor[(5,), float32]) { nn.bias_add(%x, %b) }") ==
        "Tensor[(2, 5), float32]");
  CHECK(mainResult(unary("Tensor[(2, 5), float32]", "nn.softmax(%x)")) == "Tensor[(2, 5), float32]");
  CHECK(mainResult(unary("Tensor[(2, 5), float32]", "nn.log_softmax(%x, axis=0)")) == "Tensor[(2, 5), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(2, 5), float32], %g: Tensor[(5,), float32], %b: Tensor[(5,), float32]) {"
                   " nn.layer_norm(%x, %g, %b, epsilon=1e-05f) }") == "Tensor[(2, 5), float32]");
}

TEST_CASE("shape operators") {
  std::string t = "Tensor[(2, 3, 4), float32]";
  CHECK(mainResult(unary(t, "reshape(%x, newshape=[6, -1])")) == "Tensor[(6, 4), float32]");
  CHECK(mainResult(unary(t, "reshape(%x, newshape=[0, -1])")) == "Tensor[(2, 12), float32]");
  CHECK(mainResult(unary("Tensor[(?, 3, 4), float32]", "reshape(%x, newshape=[-1, 12])")) == "Tensor[(?, 12), float32]");
  CHECK(mainResult(unary(t, "reshape(%x, newshape=[-3, -2])")) == "Tensor[(6, 4), float32]");
  CHECK(mainResult(unary(t, "transpose(%x, axes=[2, 0, 1])")) == "Tensor[(4, 2, 3), float32]");
  CHECK(mainResult(unary(t, "transpose(%x)")) == "Tensor[(4, 3, 2), float32]");
  CHECK(mainResult(unary(t, "expand_dims(%x, axis=1, num_newaxis=2)")) == "Tensor[(2, 1, 1, 3, 4), float32]");
  CHECK(mainResult(unary("Tensor[(1, 3, 1), float32]", "squeeze(%x)")) == "Tensor[(3,), float32]");
  CHECK(mainResult(unary("Tensor[(1, 3, 1), float32]", "squeeze(%x, axis=[0])")) == "Tensor[(3, 1), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(?, 3), float32]) { concatenate((%a, %b)) }") ==
        "Tensor[(?, 3), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(2, 5), float32]) { concatenate((%a, %b), axis=1) }") ==
        "Tensor[(2, 8), float32]");
  CHECK(mainResult("def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(2, 3), float32]) { stack((%a, %b), axis=1) }") ==
        "Tensor[(2, 2, 3), float32]");
  CHECK(mainResult(unary("Tensor[(6, 4), float32]", "split(%x, indices_or_sections=3)")) ==
        "(Tensor[(2, 4), float32], Tensor[(2, 4), float32], Tensor[(2, 4), float32])");
  CHECK(mainResult(unary("Tensor[(6, 4), float32]", "split(%x, indices_or_sections=[1, 4], axis=0).2")) ==
        "Tensor[(2, 4), float32]");
  CHECK(mainResult(unary("Tensor[(10, 8), float32]", "strided_slice(%x, begin=[1, 0], end=[7, 8], strides=[2, 1])")) ==
        "Tensor[(3, 8), float32]");
  CHECK(mainResult(unary("Tensor[(10, 8), float32]", "strided_slice(%x, begin=[-3], end=[10])")) ==
        "Tensor[(3, 8), float32]");
  CHECK(mainResult(unary("Tensor[(10, 8), float32]", "strided_slice(%x, begin=[9], end=[-11], strides=[-1])")) ==
        "Tensor[(10, 8), float32]");
  CHECK(mainResult(unary("Tensor[(10, 8), float32]", "strided_slice(%x, begin=[2], end=[4], axes=[1])")) ==
        "Tensor[(10, 2), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(?, 1, 8), float32], %i: int32) { take(%x, %i, axis=0) }") ==
        "Tensor[(1, 8), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(5, 8), float32], %i: Tensor[(2, 3), int32]) { take(%x, %i, axis=1) }") ==
        "Tensor[(5, 2, 3), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(5, 8), float32], %i: Tensor[(4,), int64]) { take(%x, %i) }") ==
        "Tensor[(4,), float32]");
  CHECK(mainResult(unary("Tensor[(3, 1), float32]", "broadcast_to(%x, shape=[2, 3, 4])")) == "Tensor[(2, 3, 4), float32]");
  CHECK(mainResult(unary("Tensor[(2, 3), float32]", "tile(%x, reps=[2, 1, 2])")) == "Tensor[(2, 2, 6), float32]");
  CHECK(mainResult(unary("Tensor[(2, 3), float32]", "reverse(%x, axis=1)")) == "Tensor[(2, 3), float32]");
}

TEST_CASE("creation and dynamic-shape operators") {
  CHECK(mainResult("def @main() { zeros(shape=[2, 3], dtype=\"float32\") }") == "Tensor[(2, 3), float32]");
  CHECK(mainResult("def @main() { ones(shape=[4], dtype=\"int64\") }") == "Tensor[(4,), int64]");
  CHECK(mainResult("def @main(%v: float32) { full(%v, shape=[2, 2]) }") == "Tensor[(2, 2), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(2, ?), int32]) { zeros_like(%x) }") == "Tensor[(2, ?), int32]");
  CHECK(mainResult("def @main(%x: Tensor[(2, 3), float32]) { full_like(%x, 1f) }") == "Tensor[(2, 3), float32]");
  CHECK(mainResult("def @main(%n: int32) { arange(0, %n, 1, dtype=\"int32\") }") == "Tensor[(?,), int32]");
  CHECK(mainResult("def @main(%x: Tensor[(?, 3), float32]) { shape_of(%x) }") == "Tensor[(2,), int32]");
  CHECK(mainResult("def @main(%x: Tensor[(6,), float32], %s: Tensor[(2,), int64]) { dyn.reshape(%x, %s) }") ==
        "Tensor[(?, ?), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(1,), float32], %s: Tensor[(3,), int32]) { dyn.broadcast_to(%x, %s) }") ==
        "Tensor[(?, ?, ?), float32]");
  CHECK(mainResult("def @main(%s: Tensor[(2,), int32]) { dyn.zeros(%s, dtype=\"float32\") }") == "Tensor[(?, ?), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(4, 4), float32], %b: Tensor[(2,), int32]) { dyn.strided_slice(%x, %b, %b, %b) }") ==
        "Tensor[(?, ?), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(4, 5, 6), bool]) { argwhere(%x) }") == "Tensor[(?, 3), int32]");
  CHECK(mainResult("def @main(%x: Tensor[(4,), float32]) { on_device(%x, device=\"cuda\") }") == "Tensor[(4,), float32]");
  CHECK(mainResult("def @main(%x: Tensor[(4,), float32]) { device_copy(%x, src_device=\"cpu\", dst_device=\"cpu:1\") }") ==
        "Tensor[(4,), float32]");
}

TEST_CASE("literals have the spec's types") {
  CHECK(mainResult("def @main() { (3, 3i64, 3u8, 1.5f, 2f, 1.5f64, 1.5f16, True, -1, 1e-05f) }") ==
        "(int32, int64, uint8, float32, float32, float64, float16, bool, int32, float32)");
}

TEST_CASE("? dimensions accept static sizes and widen where types meet") {
  // A static tensor is accepted where ? is expected.
  CHECK(mainResult("def @f(%x: Tensor[(?, 2, 4), float32]) { %x }\n"
                   "def @main(%y: Tensor[(1, 2, 4), float32]) { @f(%y) }") == "Tensor[(?, 2, 4), float32]");
  // The two branches of an if.
  CHECK(mainResult("def @main(%c: bool, %a: Tensor[(1, 4), float32], %b: Tensor[(3, 4), float32]) {"
                   " if (%c) { %a } else { %b } }") == "Tensor[(?, 4), float32]");
  // A loop that grows a tensor: a recursive call and its base case.
  CHECK(mainResult("def @main(%x: Tensor[(1, 4), float32]) {\n"
                   "  let %loop = fn (%i: int32, %acc) {\n"
                   "    if (%i == 0) { %acc } else { %loop(%i - 1, concatenate((%acc, %x))) }\n"
                   "  };\n"
                   "  %loop(3, %x)\n"
                   "}") == "Tensor[(?, 4), float32]");
  // Global recursion with the result left to inference.
  CHECK(mainResult("def @grow(%n: int32, %acc: Tensor[(?, 2), float32]) {\n"
                   "  if (%n == 0) { %acc } else { @grow(%n - 1, concatenate((%acc, %acc))) }\n"
                   "}\n"
                   "def @main(%x: Tensor[(1, 2), float32]) { @grow(2, %x) }") == "Tensor[(?, 2), float32]");
  // A type parameter takes the widest of its arguments, in either order.
  std::string f = "def @step(%acc: Tensor[(?, 2, 4), float32], %x: Tensor[(1, 2, 4), float32]) -> Tensor[(?, 2, 4), float32] {"
                  " concatenate((%acc, %x)) }\n";
  CHECK(mainResult(f + "def @main(%e: List[Tensor[(1, 2, 4), float32]]) { @foldl(@step, @hd(%e), @tl(%e)) }") ==
        "Tensor[(?, 2, 4), float32]");
  CHECK(mainResult(f + "def @main(%e: List[Tensor[(1, 2, 4), float32]]) {\n"
                       "  let %g = fn (%x: Tensor[(1, 2, 4), float32], %acc: Tensor[(?, 2, 4), float32]) { @step(%acc, %x) };\n"
                       "  @foldr(%g, @hd(%e), @tl(%e)) }") == "Tensor[(?, 2, 4), float32]");
  // Match arms.
  CHECK(mainResult("def @main(%o: Option[int32], %a: Tensor[(2,), float32], %b: Tensor[(5,), float32]) {"
                   " match (%o) { Some(_) => %a, None => %b } }") == "Tensor[(?,), float32]");
  // A pattern variable of a type argument, checked against a declared result: a
  // `?` on either side accepts it (errors_test has the static sizes that differ).
  CHECK(mainResult("def @main(%o: Option[Tensor[(1, 16), float32]]) -> Tensor[(1, ?), float32] {"
                   " match (%o) { Some(%v) => %v, None => zeros(shape=[1, 8], dtype=\"float32\") } }") ==
        "Tensor[(1, ?), float32]");
  CHECK(mainResult("def @main(%o: Option[Tensor[(1, ?), float32]]) -> Tensor[(1, 8), float32] {"
                   " match (%o) { Some(%v) => %v, None => zeros(shape=[1, 8], dtype=\"float32\") } }") ==
        "Tensor[(1, 8), float32]");
}

TEST_CASE("polymorphic globals, constructors and closures are instantiated per use") {
  CHECK(mainResult("def @main(%x: float32, %y: Tensor[(3,), int32]) { (@id(%x), @id(%y)) }") ==
        "(float32, Tensor[(3,), int32])");
  CHECK(mainResult("def @main(%xs: List[float32]) { (@length(%xs), @map(fn (%v: float32) { %v < 0f }, %xs)) }") ==
        "(int32, List[bool])");
  CHECK(mainResult("def @main(%xs: List[int32], %ys: List[float32]) { @zip(%xs, %ys) }") == "List[(int32, float32)]");
  CHECK(mainResult("def @main() { Cons(Some(1f), Nil) }") == "List[Option[float32]]");
  CHECK(mainResult("def @main(%xs: List[int32]) { @foldr(Cons, Nil, %xs) }") == "List[int32]");
  CHECK(mainResult("def @main(%x: float32) { let %f = @compose(fn (%a: float32) { %a * 2f }, fn (%b: int32) { cast(%b, dtype=\"float32\") }); %f(3) }") ==
        "float32");
  CHECK(mainResult("def @main(%x: int32) { @iterate(fn (%a: int32) { %a + 1 }, 3)(%x) }") == "int32");
  CHECK(mainResult("def @main(%xs: List[int32]) { @map_accuml(fn (%acc: int32, %v: int32) { (%acc + %v, %v * 2) }, 0, %xs) }") ==
        "(int32, List[int32])");
  CHECK(mainResult("def @main(%s: int32) { @unfoldr(fn (%n: int32) { if (%n == 0) { None } else { Some((%n - 1, %n)) } }, %s) }") ==
        "List[int32]");
  CHECK(mainResult("def @main(%t: Tree[int32]) { (@size(%t), @tmap(fn (%v: int32) { %v > 0 }, %t)) }") ==
        "(int32, Tree[bool])");
  CHECK(mainResult("def @main[A](%x: A) -> A { %x }") == "A");
}

TEST_CASE("closures capture, are returned and stored in lists") {
  CHECK(mainResult("def @adder(%k: Tensor[(4,), float32]) { fn (%x: Tensor[(4,), float32]) { %x + %k } }\n"
                   "def @main(%k: Tensor[(4,), float32]) { let %fs = Cons(@adder(%k), Cons(@adder(%k * 2f), Nil));"
                   " @map(fn (%f: fn (Tensor[(4,), float32]) -> Tensor[(4,), float32]) { %f(%k) }, %fs) }") ==
        "List[Tensor[(4,), float32]]");
  // Parameter types inferred from use.
  CHECK(mainResult("def @main(%y: Tensor[(2, 2), float32]) { let %f = fn (%x) { %x * %x }; %f(%y) }") ==
        "Tensor[(2, 2), float32]");
}

TEST_CASE("mutual recursion and globals used before their definition") {
  CHECK(mainResult("def @main(%n: int32) { @even(%n) }\n"
                   "def @even(%n: int32) -> bool { if (%n == 0) { True } else { @odd(%n - 1) } }\n"
                   "def @odd(%n: int32) -> bool { if (%n == 0) { False } else { @even(%n - 1) } }") == "bool");
  CHECK(mainResult("def @main(%n: int32) { @ping(%n) }\n"
                   "def @ping(%n: int32) { if (%n <= 0) { 0f } else { @pong(%n - 1) } }\n"
                   "def @pong(%n: int32) { @ping(%n - 2) + 1f }") == "float32");
}

TEST_CASE("user ADTs, nested patterns and graph-style bindings") {
  CHECK(mainResult("type Expr { Num(int32), Plus(Expr, Expr), Neg(Expr) }\n"
                   "def @eval(%e: Expr) -> int32 { match (%e) { Num(%n) => %n, Plus(%a, %b) => @eval(%a) + @eval(%b),"
                   " Neg(Neg(%a)) => @eval(%a), Neg(%a) => 0 - @eval(%a) } }\n"
                   "def @main() { @eval(Plus(Num(1), Neg(Num(2)))) }") == "int32");
  CHECK(mainResult("def @main(%x: Tensor[(2, 2), float32]) {\n  %0 = add(%x, %x);\n  %1 = (%0, %x);\n  %1.0\n}") ==
        "Tensor[(2, 2), float32]");
  CHECK(mainResult("def @main(%p: (int32, (float32, bool))) { match (%p) { (%a, (_, %c)) => (%c, %a) } }") ==
        "(bool, int32)");
  // A program's own definition overrides the prelude's.
  CHECK(mainResult("def @length(%x: float32) -> float32 { %x }\ndef @main() { @length(2f) }") == "float32");
}

TEST_CASE("every expression and variable gets a checked type") {
  auto m = kiln::test::check("def @main(%x: Tensor[(2, 3), float32]) { let %y = nn.relu(%x); sum(%y, axis=[1]) }");
  const auto* f = m->findFunction("main")->fn;
  auto* let = static_cast<const kiln::ir::Let*>(f->body);
  REQUIRE(let->kind == kiln::ir::ExprKind::Let);
  CHECK(kiln::ir::typeToString(let->var->type) == "Tensor[(2, 3), float32]");
  CHECK(kiln::ir::typeToString(let->value->type) == "Tensor[(2, 3), float32]");
  CHECK(kiln::ir::typeToString(let->body->type) == "Tensor[(2,), float32]");
  CHECK(kiln::ir::typeToString(let->type) == "Tensor[(2,), float32]");
}

TEST_CASE("typecheck: literals take the type TVM gives them") {
  CHECK(mainResult("def @main() { 2147483647 }") == "int32");
  CHECK(mainResult("def @main() { 2147483648 }") == "int64");  // too large for int32: an int64, not a wrapped int32
  CHECK(mainResult("def @main() { -2147483648i32 }") == "int32");
  CHECK(mainResult("def @main() { -128i8 }") == "int8");
  CHECK(mainResult("def @main() { 3.4028235e38f32 }") == "float32");  // float32's maximum as usually written
}

TEST_CASE("typecheck: a polymorphic global without a return annotation is instantiated at each call") {
  // TVM's prelude writes its polymorphic functions this way.
  CHECK(mainResult("def @k[A](%x: A) { %x }\ndef @main(%a: float32) -> float32 { @k(%a) }") == "float32");
  CHECK(mainResult("def @k[A](%x: A) { %x }\ndef @main(%a: float32, %b: int32) { (@k(%a), @k(%b)) }") == "(float32, int32)");
}

TEST_CASE("prelude: a program's definitions leave the prelude's same-named ones, and their users, out") {
  std::string_view full = kiln::parser::preludeSource();
  std::string none = kiln::parser::preludeFor("def @main() { 1 }");
  CHECK(none == full);
  std::string text = kiln::parser::preludeFor("def @sum(%x: float32) { %x }\ndef @main() { 1 }");
  CHECK(text.size() == full.size());  // blanked in place: lines and columns stay
  CHECK(std::count(text.begin(), text.end(), '\n') == std::count(full.begin(), full.end(), '\n'));
  CHECK(text.find("def @sum") == std::string::npos);
  CHECK(full.find("def @sum") != std::string_view::npos);
  CHECK(text.find("def @map") != std::string::npos);  // does not use @sum
  std::string noList = kiln::parser::preludeFor("type List[A] { Cons(A, List[A]), Nil }\ndef @main() { 1 }");
  CHECK(noList.find("type List") == std::string::npos);
  CHECK(noList.find("def @map") == std::string::npos);   // built on List
  CHECK(noList.find("type Option") != std::string::npos);  // independent of List
}
