// The default rewrite: rebuild a node when a child changed.
#include "compiler/ir/mutator.h"

#include <vector>

namespace kiln::ir {

const Expr* ExprMutator::mutate(const Expr* e) {
  auto it = memo_.find(e);
  if (it != memo_.end()) return it->second;
  const Expr* r = visit(e);
  memo_.emplace(e, r);
  return r;
}

const Expr* ExprMutator::visitLet(const Let* first) {
  std::vector<std::pair<const Let*, const Expr*>> chain;
  const Expr* e = first;
  while (e->kind == ExprKind::Let && !memo_.count(e)) {
    auto* l = static_cast<const Let*>(e);
    chain.emplace_back(l, mutate(l->value));
    e = l->body;
  }
  const Expr* body = mutate(e);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Let* l = it->first;
    const Expr* value = it->second;
    const Expr* rebuilt = (value == l->value && body == l->body)
                              ? l
                              : typed(b_.let(l->var, value, body, l->graphStyle, l->loc), l);
    memo_.emplace(l, rebuilt);
    body = rebuilt;
  }
  return body;
}

bool ExprMutator::mutateAll(std::span<const Expr* const> in, std::vector<const Expr*>& out) {
  bool changed = false;
  for (const Expr* x : in) {
    out.push_back(mutate(x));
    changed |= out.back() != x;
  }
  return changed;
}

const Expr* ExprMutator::visit(const Expr* e) {
  switch (e->kind) {
    case ExprKind::Var:
    case ExprKind::GlobalVar:
    case ExprKind::Constant:
    case ExprKind::Op:
    case ExprKind::Ctor: return e;
    case ExprKind::Let: return visitLet(static_cast<const Let*>(e));
    case ExprKind::Call: {
      auto* c = static_cast<const Call*>(e);
      const Expr* callee = mutate(c->callee);
      std::vector<const Expr*> args;
      bool changed = mutateAll(c->args, args) | (callee != c->callee);
      return changed ? typed(b_.call(callee, args, c->attrs, c->loc), c) : e;
    }
    case ExprKind::If: {
      auto* i = static_cast<const If*>(e);
      const Expr *c = mutate(i->cond), *t = mutate(i->thenBranch), *f = mutate(i->elseBranch);
      return c == i->cond && t == i->thenBranch && f == i->elseBranch ? e : typed(b_.ifElse(c, t, f, i->loc), i);
    }
    case ExprKind::Match: {
      auto* m = static_cast<const Match*>(e);
      const Expr* s = mutate(m->scrutinee);
      std::vector<Clause> clauses;
      bool changed = s != m->scrutinee;
      for (const Clause& c : m->clauses) {
        Clause n{visitPattern(c.pattern), mutate(c.body)};
        changed |= n.pattern != c.pattern || n.body != c.body;
        clauses.push_back(n);
      }
      return changed ? typed(b_.match(s, clauses, m->complete, m->loc), m) : e;
    }
    case ExprKind::Function: {
      auto* f = static_cast<const Function*>(e);
      const Expr* body = mutate(f->body);
      if (body == f->body) return e;
      Function* n = b_.function(f->typeParams, f->params, f->resultAnnotation, body, f->loc);
      n->primitive = f->primitive;
      n->closure = f->closure;
      n->attrs = f->attrs;
      return typed(n, f);
    }
    case ExprKind::Tuple: {
      auto* t = static_cast<const Tuple*>(e);
      std::vector<const Expr*> fields;
      return mutateAll(t->fields, fields) ? typed(b_.tuple(fields, t->loc), t) : e;
    }
    case ExprKind::TupleGet: {
      auto* g = static_cast<const TupleGet*>(e);
      const Expr* t = mutate(g->tuple);
      return t == g->tuple ? e : typed(b_.tupleGet(t, g->index, g->loc), g);
    }
    case ExprKind::RefOp: {
      auto* r = static_cast<const RefOp*>(e);
      std::vector<const Expr*> args;
      return mutateAll(r->args, args) ? typed(b_.refOp(r->op, args, r->loc), r) : e;
    }
  }
  return e;
}

}  // namespace kiln::ir
