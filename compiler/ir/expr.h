// Expressions and patterns of the IR: a functional, Relay-like language.
//
// Representation: every node is immutable once built, arena-allocated, and starts
// with its kind and source location. Children are pointers (or spans of pointers)
// into the same arena, so passes share unchanged subtrees and never mutate a node
// another module can see. The one exception is `type`, the checked type, which the
// type checker fills in exactly once per node (a cache of a fact about the node,
// as Relay's checked_type_).
//
// Variables: a `Var` node is both the binder and every reference to it: a
// reference points at the binding node, so identity is pointer equality and
// renaming is free. `GlobalVar`s are one node per name per module.
//
// Deep programs: a let chain is a nest of Let nodes along `body`; every traversal
// walks chains with a loop, not recursion, so 10^5 bindings cost no stack.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "compiler/ir/type.h"
#include "kernel_ir/attrs.h"
#include "kernel_ir/op.h"

namespace kiln::ir {

enum class ExprKind : uint8_t {
  Var,
  GlobalVar,
  Constant,
  Op,
  Ctor,
  Call,
  Let,
  If,
  Match,
  Function,
  Tuple,
  TupleGet,
  RefOp,
};

struct Expr {
  ExprKind kind;
  SourceLoc loc;
  mutable const Type* type = nullptr;  // the checked type, set by the type checker
};

struct Var : Expr {
  std::string_view name;
  const Type* annotation = nullptr;  // as written; null when left out
};

struct GlobalVar : Expr {
  std::string_view name;
};

// A scalar literal. Tensor constants (weights) arrive with a later issue.
struct Constant : Expr {
  DType dtype;
  int64_t intValue = 0;  // integer and bool literals
  double floatValue = 0;  // float literals
};

struct OpRef : Expr {
  const ops::OpDef* op;
};

struct CtorRef : Expr {
  const Constructor* ctor;
};

struct Call : Expr {
  const Expr* callee;
  std::span<const Expr* const> args;
  const ops::AttrMap* attrs = nullptr;  // operator calls only; null when none were written
};

struct Let : Expr {
  const Var* var;
  const Expr* value;
  const Expr* body;
  bool graphStyle = false;  // written `%0 = value; body`
};

struct If : Expr {
  const Expr* cond;
  const Expr* thenBranch;
  const Expr* elseBranch;
};

enum class PatternKind : uint8_t { Wildcard, Var, Ctor, Tuple };

struct Pattern {
  PatternKind kind;
  SourceLoc loc;
};
struct PatternVar : Pattern {
  const Var* var;
};
struct PatternCtor : Pattern {
  const Constructor* ctor;
  std::span<const Pattern* const> args;
};
struct PatternTuple : Pattern {
  std::span<const Pattern* const> fields;
};

struct Clause {
  const Pattern* pattern;
  const Expr* body;
};

struct Match : Expr {
  const Expr* scrutinee;
  std::span<const Clause> clauses;
  bool complete = true;  // `match` (checked exhaustive) versus `match?`
};

struct Function : Expr {
  std::span<const TypeParam* const> typeParams;
  std::span<const Var* const> params;
  const Type* resultAnnotation = nullptr;
  const Expr* body;
  bool primitive = false;  // a fused kernel (made by the fusion pass, or written Primitive=1): only operators on tensors
  // Attributes written in the parameter list, TVM style (`fn (%x, Primitive=1)`,
  // `Compiler="dnnl"`, `global_symbol="f"`); kept and printed back. Null: none.
  const ops::AttrMap* attrs = nullptr;
  // Made by lambda lifting: the body of a global `def @g(captured...) { closure fn }`.
  // `@g(captured...)` builds the closure; `@g(captured..., args...)` calls it directly.
  bool closure = false;
};

struct Tuple : Expr {
  std::span<const Expr* const> fields;
};

struct TupleGet : Expr {
  const Expr* tuple;
  uint32_t index;
};

// Reference cells, as TVM's RefCreate/RefRead/RefWrite: `ref(v)` makes a mutable
// cell holding v (of type `ref(T)`), `ref_read(r)` reads it, `ref_write(r, v)`
// replaces its content and yields `()`. The one mutable value of the language: a
// pass may neither drop, duplicate nor reorder a ref operation, and a cell is never
// copied (to another device or otherwise): every copy of the value is the same cell.
enum class RefOpKind : uint8_t { Create, Read, Write };

struct RefOp : Expr {
  RefOpKind op;
  std::span<const Expr* const> args;  // Create: value; Read: ref; Write: ref, value
};

// Node construction. Every builder allocates in the given arena.
class Builder {
 public:
  explicit Builder(Arena& a) : a_(a) {}
  Arena& arena() { return a_; }

  Var* var(std::string_view name, const Type* annotation, SourceLoc loc);
  GlobalVar* globalVar(std::string_view name, SourceLoc loc);
  Constant* intConst(DType dtype, int64_t v, SourceLoc loc);
  Constant* floatConst(DType dtype, double v, SourceLoc loc);
  OpRef* op(const ops::OpDef* op, SourceLoc loc);
  CtorRef* ctor(const Constructor* c, SourceLoc loc);
  Call* call(const Expr* callee, std::span<const Expr* const> args, const ops::AttrMap* attrs, SourceLoc loc);
  Let* let(const Var* v, const Expr* value, const Expr* body, bool graphStyle, SourceLoc loc);
  If* ifElse(const Expr* c, const Expr* t, const Expr* e, SourceLoc loc);
  Match* match(const Expr* s, std::span<const Clause> clauses, bool complete, SourceLoc loc);
  Function* function(std::span<const TypeParam* const> typeParams, std::span<const Var* const> params,
                     const Type* result, const Expr* body, SourceLoc loc);
  Tuple* tuple(std::span<const Expr* const> fields, SourceLoc loc);
  TupleGet* tupleGet(const Expr* t, uint32_t index, SourceLoc loc);
  RefOp* refOp(RefOpKind op, std::span<const Expr* const> args, SourceLoc loc);

  Pattern* wildcard(SourceLoc loc);
  PatternVar* patternVar(const Var* v, SourceLoc loc);
  PatternCtor* patternCtor(const Constructor* c, std::span<const Pattern* const> args, SourceLoc loc);
  PatternTuple* patternTuple(std::span<const Pattern* const> fields, SourceLoc loc);

 private:
  Arena& a_;
};

}  // namespace kiln::ir
