// forEachChild: the direct subexpressions of an expression, in evaluation order
// (and opCall: an expression as a call of a named operator; forEachPatternVar:
// the variables a match pattern binds).
// Passes that walk the IR with an explicit stack (so deep programs cost no C++
// stack) use it instead of repeating the per-kind switch. The bodies of primitive
// functions (kernels) are not children: they hold only operator calls.
#pragma once

#include <vector>

#include "compiler/ir/expr.h"

namespace kiln::ir {

inline bool isPrimitiveFunction(const Expr* e) {
  return e->kind == ExprKind::Function && static_cast<const Function*>(e)->primitive;
}

// `e` as a call of the operator `name`, or null.
inline const Call* opCall(const Expr* e, std::string_view name) {
  if (e->kind != ExprKind::Call) return nullptr;
  auto* c = static_cast<const Call*>(e);
  if (c->callee->kind != ExprKind::Op || static_cast<const OpRef*>(c->callee)->op->name != name) return nullptr;
  return c;
}

// Every variable a match pattern binds (iteratively: patterns may nest deeply).
template <class F>
void forEachPatternVar(const Pattern* root, F&& f) {
  std::vector<const Pattern*> patterns{root};
  while (!patterns.empty()) {
    const Pattern* p = patterns.back();
    patterns.pop_back();
    if (p->kind == PatternKind::Var) f(static_cast<const PatternVar*>(p)->var);
    else if (p->kind == PatternKind::Ctor)
      for (const Pattern* q : static_cast<const PatternCtor*>(p)->args) patterns.push_back(q);
    else if (p->kind == PatternKind::Tuple)
      for (const Pattern* q : static_cast<const PatternTuple*>(p)->fields) patterns.push_back(q);
  }
}

template <class F>
void forEachChild(const Expr* e, F&& f) {
  switch (e->kind) {
    case ExprKind::Let: {
      auto* l = static_cast<const Let*>(e);
      f(l->value);
      f(l->body);
      break;
    }
    case ExprKind::Call: {
      auto* c = static_cast<const Call*>(e);
      if (!isPrimitiveFunction(c->callee)) f(c->callee);
      for (const Expr* a : c->args) f(a);
      break;
    }
    case ExprKind::If: {
      auto* i = static_cast<const If*>(e);
      f(i->cond);
      f(i->thenBranch);
      f(i->elseBranch);
      break;
    }
    case ExprKind::Match: {
      auto* m = static_cast<const Match*>(e);
      f(m->scrutinee);
      for (const Clause& c : m->clauses) f(c.body);
      break;
    }
    case ExprKind::Function:
      if (!isPrimitiveFunction(e)) f(static_cast<const Function*>(e)->body);
      break;
    case ExprKind::Tuple:
      for (const Expr* x : static_cast<const Tuple*>(e)->fields) f(x);
      break;
    case ExprKind::TupleGet: f(static_cast<const TupleGet*>(e)->tuple); break;
    case ExprKind::RefOp:
      for (const Expr* x : static_cast<const RefOp*>(e)->args) f(x);
      break;
    default: break;
  }
}

}  // namespace kiln::ir
