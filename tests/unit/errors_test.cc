// Bad programs: every syntax and type error names file:line:col and says what was
// expected and what was found. Each case asserts the whole message.
#include "test_util.h"

namespace {
struct BadProgram {
  const char* name;
  const char* source;
  const char* expected;  // after "t.relay:"
};

const BadProgram kBadPrograms[] = {
    {"missing paren", "def @main(%x: float32 { %x }",
     "1:23: error: expected ')' to end the parameter list, but found '{'"},
    {"unknown var", "def @main(%x: float32) {\n  %y\n}",
     "2:3: error: unknown variable %y"},
    {"let value made of itself", "def @main() {\n  let %f = fn () { 1 } + %f();\n  %f\n}",
     "2:7: error: %f is used in its own value; only a function (fn) bound by let may refer to itself"},
    {"undefined global", "def @main() { @nope(1) }",
     "1:15: error: undefined global function @nope"},
    {"unknown op", "def @main(%x: float32) { frobnicate(%x) }",
     "1:26: error: unknown operator 'frobnicate'"},
    {"op arity", "def @main(%x: float32) { add(%x) }",
     "1:26: error: operator 'add' takes 2 operand(s), but 1 were given"},
    {"bad top level", "let %x = 1;",
     "1:1: error: expected 'def' or 'type' at the top level, but found 'let'"},
    {"unterminated comment", "/* open\ndef @main() { 1 }",
     "1:1: error: unterminated block comment"},
    {"bad char", "def @main() { 1 $ 2 }",
     "1:17: error: unexpected character '$'"},
    {"bad suffix", "def @main() { 3q8 }",
     "1:15: error: unknown literal suffix 'q8' in '3q8'"},
    {"suffixed literal too large", "def @main() { 2147483648i32 }",
     "1:15: error: the literal '2147483648i32' does not fit int32"},
    {"int16 literal too large", "def @main() { 32768i16 }",
     "1:15: error: the literal '32768i16' does not fit int16"},
    {"negative int8 literal too small", "def @main() { -129i8 }",
     "1:15: error: the literal '-129i8' does not fit int8"},
    {"float32 literal overflows", "def @main() { 3.5e38f32 }",
     "1:15: error: the literal '3.5e38f32' does not fit float32"},
    {"float16 literal overflows", "def @main() { 65505f16 }",
     "1:15: error: the literal '65505f16' does not fit float16"},
    {"unclosed parenthesis", "def @main(%x: float32) {\n  let %y = %x;\n  add(%x, %x;\n  %y\n}\n\n",
     "5:1: error: expected ')' to close the '(' opened at 3:6, but found '}'"},
    {"extra parenthesis", "def @main(%x: float32) {\n  let %y = add(%x, %x));\n  %y\n}\n",
     "2:23: error: expected '}' to close the '{' opened at 1:24, but found ')'"},
    {"unclosed brace", "def @main(%x: float32) {\n  %x\n\n",
     "4:1: error: expected '}' to close the '{' opened at 1:24, but found end of input"},
    {"long token quoted short", "def @main() { \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" }",
     "1:15: error: expected an expression, but found string \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\""},
    {"function attribute twice", "def @f(%x: float32, Inline=1, Inline=1) { %x }\ndef @main() { 1 }",
     "1:31: error: attribute 'Inline' is given twice"},
    {"split layout", "def @main(%x: Tensor[(1, 16, 2, 2), float32]) { layout_transform(%x, src_layout=\"NCHW\", dst_layout=\"NCHW16c\") }",
     "1:49: error: layout_transform: attribute 'dst_layout' = \"NCHW16c\" is not a layout of upper-case axis letters (split layouts such as NCHW16c are not supported)"},
    {"empty type", "type T { }\ndef @main() { 1 }",
     "1:8: error: type 'T' has no constructors"},
    {"version header not first", "def @main() { 1 }\n#[version = \"0.0.5\"]",
     "2:1: error: a '#[version = \"...\"]' line may only begin the program"},
    {"malformed version header", "#[version = 5]\ndef @main() { 1 }",
     "1:1: error: expected '#[version = \"0.0.5\"]', but found '#[version = 5]'"},
    {"literal past int64", "def @main() { 99999999999999999999 }",
     "1:15: error: integer literal '99999999999999999999' is too large for int64"},
    {"unknown type", "def @main(%x: Tensor[(2), float33]) { %x }",
     "1:27: error: unknown dtype 'float33'"},
    {"unknown type name", "def @main(%x: Foo) { %x }",
     "1:15: error: expected a type, but found 'Foo'"},
    {"type args arity", "def @main(%x: List) { %x }",
     "1:15: error: type 'List' takes 1 type argument(s), but 0 were given"},
    {"unknown ctor", "def @main() { Conz(1, Nil) }",
     "1:15: error: unknown constructor 'Conz'"},
    {"ctor pattern arity", "def @main(%x: List[int32]) { match (%x) { Cons(%a) => %a, Nil => 0 } }",
     "1:43: error: constructor Cons has 2 field(s), but the pattern gives 1"},
    {"dup def", "def @f() { 1 }\ndef @f() { 2 }",
     "2:5: error: global function @f is defined twice"},
    {"dup param", "def @f(%a: int32, %a: int32) { %a }",
     "1:19: error: parameter %a is declared twice"},
    {"dup graph", "def @main(%x: float32) {\n  %0 = add(%x, %x);\n  %0 = add(%x, %x);\n  %0\n}",
     "3:3: error: %0 is bound twice in this function"},
    {"named graph", "def @main(%x: float32) {\n  %y = add(%x, %x);\n  %y\n}",
     "2:3: error: a binding without 'let' must be numbered (%0 = ...); write 'let %y = ...'"},
    {"attr on non-op", "def @f(%x: int32) { %x }\ndef @main() { @f(1, axis=2) }",
     "2:21: error: attributes on a call of a function need attrs_type_key=\"...\" (as TVM writes them); only operators take bare attributes"},
    {"positional after attr", "def @main(%x: Tensor[(2, 3), float32]) { sum(%x, axis=1, %x) }",
     "1:58: error: expected an attribute (name=value) after the first attribute, but found '%x'"},
    {"dup attr", "def @main(%x: Tensor[(2, 3), float32]) { sum(%x, axis=1, axis=0) }",
     "1:58: error: attribute 'axis' is given twice"},
    {"empty match", "def @main(%x: int32) { match (%x) { } }",
     "1:24: error: a match needs at least one clause"},
    {"missing else", "def @main(%c: bool) { if (%c) { 1 } }",
     "1:37: error: expected 'else', but found '}'"},
    {"missing semicolon", "def @main() {\n  let %x = 1\n  %x\n}",
     "3:3: error: expected ';' after the bound value, but found '%x'"},
    {"broadcast", "def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(4,), float32]) {\n  add(%a, %b)\n}",
     "2:3: error: add: shapes (2, 3) and (4,) do not broadcast"},
    {"dtype mismatch", "def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(2, 3), int32]) { %a + %b }",
     "1:72: error: add: operand dtypes differ: float32 and int32"},
    {"float op on int", "def @main(%a: Tensor[(2,), int32]) { exp(%a) }",
     "1:38: error: exp: operand must have a float dtype, but has int32"},
    {"logical on float", "def @main(%a: float32) { logical_not(%a) }",
     "1:26: error: logical_not: operand must have a bool dtype, but has float32"},
    {"reduce axis range", "def @main(%a: Tensor[(2, 3), float32]) { sum(%a, axis=[2]) }",
     "1:42: error: sum: axis=2 is out of range for an operand of rank 2"},
    {"dense K mismatch", "def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 9), float32]) { nn.dense(%x, %w) }",
     "1:72: error: nn.dense: reduction dimensions differ: 8 and 9 (operands Tensor[(4, 8), float32] and Tensor[(16, 9), float32])"},
    {"dense units", "def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32]) { nn.dense(%x, %w, units=10) }",
     "1:72: error: nn.dense: attribute 'units' = 10 does not match the weight's 16 output units"},
    {"conv channels", "def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 5, 3, 3), float32]) { nn.conv2d(%x, %w) }",
     "1:83: error: nn.conv2d: data has 3 channels but the weight expects 5 (5 per group, groups=1)"},
    {"conv layout", "def @main(%x: Tensor[(1, 8, 8, 3), float32], %w: Tensor[(4, 3, 3, 3), float32]) { nn.conv2d(%x, %w, data_layout=\"NCHW4c\") }",
     "1:83: error: nn.conv2d: attribute 'data_layout' = \"NCHW4c\" is not supported (supported: \"NCHW\", \"NHWC\")"},
    {"unknown attr", "def @main(%x: Tensor[(2, 3), float32]) { nn.softmax(%x, dim=1) }",
     "1:42: error: nn.softmax: unknown attribute 'dim'"},
    {"reshape count", "def @main(%x: Tensor[(2, 3), float32]) { reshape(%x, newshape=[4, 2]) }",
     "1:42: error: reshape: attribute 'newshape' cannot reshape (2, 3) (6 elements) to (4, 2) (8 elements)"},
    {"concat mismatch", "def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(2, 4), float32]) { concatenate((%a, %b)) }",
     "1:71: error: concatenate: fields Tensor[(2, 3), float32] and Tensor[(2, 4), float32] differ outside axis 0"},
    {"split uneven", "def @main(%x: Tensor[(5, 2), float32]) { split(%x, indices_or_sections=2) }",
     "1:42: error: split: attribute 'indices_or_sections' = 2 does not divide the axis extent 5"},
    {"take float idx", "def @main(%x: Tensor[(5, 2), float32], %i: float32) { take(%x, %i, axis=0) }",
     "1:55: error: take: indices must have an integer dtype, but has float32"},
    {"cast no dtype", "def @main(%x: float32) { cast(%x) }",
     "1:26: error: cast: attribute 'dtype' is required"},
    {"transpose perm", "def @main(%x: Tensor[(2, 3), float32]) { transpose(%x, axes=[0, 0]) }",
     "1:42: error: transpose: attribute 'axes' is not a permutation"},
    {"squeeze non1", "def @main(%x: Tensor[(2, 3), float32]) { squeeze(%x, axis=[1]) }",
     "1:42: error: squeeze: attribute 'axis' names dimension 1 of size 3, which is not 1"},
    {"if cond type", "def @main(%x: Tensor[(2,), bool]) { if (%x) { 1 } else { 2 } }",
     "1:37: error: the condition of 'if' must be a bool or integer scalar, but has type Tensor[(2,), bool]"},
    {"if branches", "def @main(%c: bool) { if (%c) { 1 } else { 2f } }",
     "1:23: error: the branches of 'if' have different types: expected int32, but found float32"},
    {"match arms", "def @main(%o: Option[int32]) { match (%o) { Some(%v) => %v, None => 1f } }",
     "1:69: error: the clauses of 'match' have different types: expected int32, but found float32"},
    {"non-exhaustive", "def @main(%xs: List[int32]) {\n  match (%xs) {\n    Cons(%x, _) => %x,\n  }\n}",
     "2:3: error: match is not exhaustive: no clause matches Nil"},
    {"non-exhaustive nested", "def @main(%xs: List[int32]) { match (%xs) { Cons(%x, Cons(_, _)) => %x, Nil => 0 } }",
     "1:31: error: match is not exhaustive: no clause matches Cons(_, Nil)"},
    {"non-exhaustive tuple", "def @main(%p: (Option[int32], bool)) { match (%p) { (Some(%v), _) => %v } }",
     "1:40: error: match is not exhaustive: no clause matches (None, _)"},
    {"wrong arg type", "def @f(%x: Tensor[(4,), float32]) { %x }\ndef @main(%y: Tensor[(5,), float32]) { @f(%y) }",
     "2:42: error: argument 1 of @f: expected Tensor[(4,), float32], but found Tensor[(5,), float32]"},
    {"wrong arg count", "def @f(%x: float32) { %x }\ndef @main() { @f(1f, 2f) }",
     "2:17: error: @f takes 1 argument(s), but 2 were given"},
    {"return mismatch", "def @main(%x: float32) -> int32 { %x }",
     "1:1: error: @main is declared to return int32, but its body has another type: expected int32, but found float32"},
    // Each returned branch against the declared result, at the branch: joined first,
    // (1, 8) and (1, 16) made (1, ?), which the declaration accepted.
    {"return mismatch in a branch",
     "def @main(%x: Tensor[(1, 16), float32], %c: bool) -> Tensor[(1, 8), float32] {\n"
     "  if (%c) { zeros(shape=[1, 8], dtype=\"float32\") } else { %x }\n}",
     "2:3: error: @main is declared to return Tensor[(1, 8), float32], but the 'else' branch of this 'if' has another type: "
     "expected Tensor[(1, 8), float32], but found Tensor[(1, 16), float32]"},
    {"return mismatch in a clause",
     "type L { N, C(Tensor[(1, 16), float32], L) }\ndef @main(%l: L) -> Tensor[(1, 8), float32] {\n  match (%l) {\n"
     "    N => zeros(shape=[1, 8], dtype=\"float32\"),\n    C(%h, _) => let %y = %h; %y,\n  }\n}",
     "5:17: error: @main is declared to return Tensor[(1, 8), float32], but this clause of 'match' has another type: "
     "expected Tensor[(1, 8), float32], but found Tensor[(1, 16), float32]"},
    // A pattern variable of a type argument is an unknown bound to (1, 16): the
    // check no longer widens it, nor does the other clause's (1, 8) joined into
    // the match's result (which shares that unknown) hide the mismatch.
    {"return mismatch through a type argument",
     "type O[A] { No, Yes(A) }\ndef @main(%o: O[Tensor[(1, 16), float32]]) -> Tensor[(1, 8), float32] {\n"
     "  match (%o) {\n    Yes(%v) => %v,\n    No => zeros(shape=[1, 8], dtype=\"float32\"),\n  }\n}",
     "4:5: error: @main is declared to return Tensor[(1, 8), float32], but this clause of 'match' has another type: "
     "expected Tensor[(1, 8), float32], but found Tensor[(1, 16), float32]"},
    {"return mismatch through a type argument, in a closure",
     "type O[A] { No, Yes(A) }\ndef @main(%o: O[Tensor[(1, 16), float32]]) -> Tensor[(1, 8), float32] {\n"
     "  let %g = fn (%p: O[Tensor[(1, 16), float32]]) -> Tensor[(1, 8), float32] {\n"
     "    match (%p) {\n      No => zeros(shape=[1, 8], dtype=\"float32\"),\n      Yes(%v) => %v,\n    }\n  };\n  %g(%o)\n}",
     "6:7: error: the function is declared to return Tensor[(1, 8), float32], but this clause of 'match' has another type: "
     "expected Tensor[(1, 8), float32], but found Tensor[(1, 16), float32]"},
    {"argument mismatch through a type argument",
     "type O[A] { No, Yes(A) }\ndef @f(%x: Tensor[(1, 8), float32]) { %x }\n"
     "def @main(%o: O[Tensor[(1, 16), float32]]) {\n  match (%o) {\n    Yes(%v) => @f(%v),\n"
     "    No => zeros(shape=[1, 8], dtype=\"float32\"),\n  }\n}",
     "5:18: error: argument 1 of @f: expected Tensor[(1, 8), float32], but found Tensor[(1, 16), float32]"},
    {"let annotation", "def @main(%x: float32) {\n  let %y: int32 = %x;\n  %y\n}",
     "2:3: error: the value bound to %y does not match its annotation: expected int32, but found float32"},
    {"call non-function", "def @main(%x: float32) { %x(1) }",
     "1:28: error: %x is not a function; it has type float32"},
    {"tuple index", "def @main(%t: (int32, int32)) { %t.2 }",
     "1:35: error: tuple field .2 is out of range for a tuple of 2 field(s), of type (int32, int32)"},
    {"field of non-tuple", "def @main(%t: int32) { %t.0 }",
     "1:26: error: field access .N needs a tuple, but the value has type int32"},
    {"pattern type", "def @main(%x: Option[int32]) { match (%x) { Cons(_, _) => 1, _ => 2 } }",
     "1:45: error: pattern Cons cannot match this value: expected List[_], but found Option[int32]"},
    {"ctor arg type", "def @main() { Cons(1, Cons(2f, Nil)) }",
     "1:27: error: argument 2 of constructor Cons: expected int32, but found float32"},
    {"polymorphic clash", "def @main(%x: int32) { @compose(fn (%a: float32) { %a }, fn (%b: int32) { %b }) }",
     "1:58: error: argument 2 of @compose: expected float32, but found int32"},
    {"op on ADT", "def @main(%x: List[float32]) { exp(%x) }",
     "1:32: error: operator 'exp' expects a tensor, but operand has type List[float32]"},
    {"unannotated param", "def @f(%x) { 1 }\ndef @main() { @f }",
     "1:8: error: cannot infer the type of parameter %x of @f; add a type annotation"},
    {"tuple of non-tensors", "def @main(%x: List[float32]) { concatenate((%x, %x)) }",
     "1:44: error: operator 'concatenate' expects a tuple of tensors, but operand has type List[float32]"},
    {"uint8 negative", "def @main() { -3u8 }",
     "1:15: error: a uint8 literal cannot be negative"},
    {"type named as a dtype", "type float32 { A }\ndef @main() { 1 }",
     "1:6: error: 'float32' cannot name a type: it already means something in Relay"},
    {"constructor named as a keyword", "type T { fn }\ndef @main() { 1 }",
     "1:10: error: 'fn' cannot name a constructor: it already means something in Relay"},
    {"lower-case unknown name", "type nat { zero, succ(nat) }\ndef @main() { zero2 }",
     "2:15: error: unknown operator 'zero2'"},
    {"extern type with constructors", "extern type S { A }\ndef @main() { 1 }",
     "1:15: error: an extern type has no constructors; expected the next definition, but found '{'"},
    {"ref_write of another type", "def @main(%c: ref(float32)) {\n  ref_write(%c, 1)\n}",
     "2:17: error: ref_write of a reference to float32: the value has another type: expected float32, but found int32"},
    {"ref_read of a non-reference", "def @main(%c: float32) { ref_read(%c) }",
     "1:26: error: ref_read needs a reference: expected ref(_), but found float32"},
    {"ref_write arity", "def @main(%c: ref(float32)) { ref_write(%c) }",
     "1:43: error: expected ',' between the reference and the value of 'ref_write', but found ')'"},
};
}  // namespace

TEST_CASE("bad programs give located errors") {
  static_assert(sizeof(kBadPrograms) / sizeof(kBadPrograms[0]) >= 40);
  for (const BadProgram& p : kBadPrograms) {
    CAPTURE(p.name);
    CHECK(kiln::test::errorOf(p.source) == std::string("t.relay:") + p.expected);
  }
}

TEST_CASE("kiln::Error keeps the location and the bare message apart") {
  try {
    kiln::test::check("def @main() {\n  @nope()\n}");
    FAIL("expected an error");
  } catch (const kiln::Error& e) {
    CHECK(e.file() == "t.relay");
    CHECK(e.loc().line == 2);
    CHECK(e.loc().col == 3);
    CHECK(e.message() == "undefined global function @nope");
  }
}
