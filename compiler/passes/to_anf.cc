// The A-normal form conversion (see to_anf.h for the form and the order).
#include "compiler/passes/to_anf.h"

#include <vector>

namespace kiln::compiler {

using namespace kiln::ir;

bool isAtom(const Expr* e) {
  switch (e->kind) {
    case ExprKind::Var:
    case ExprKind::GlobalVar:
    case ExprKind::Constant:
    case ExprKind::Ctor:
    case ExprKind::Op: return true;
    default: return false;
  }
}

namespace {

class ANF {
 public:
  explicit ANF(Arena& a) : b_(a) {}

  // A let chain computing `e`: the bindings it needs, then its value.
  const Expr* block(const Expr* e) {
    std::vector<Binding> bindings;
    const Expr* v = value(e, bindings);
    return wrap(bindings, v);
  }

 private:
  struct Binding {
    const Var* var;
    const Expr* value;
    const Let* original;  // keeps graph-style and location when the let came from source
  };

  const Expr* wrap(std::vector<Binding>& bs, const Expr* body) {
    for (auto it = bs.rbegin(); it != bs.rend(); ++it) {
      Let* l = b_.let(it->var, it->value, body, it->original && it->original->graphStyle,
                      it->original ? it->original->loc : it->value->loc);
      l->type = body->type;
      body = l;
    }
    return body;
  }

  const Expr* atom(const Expr* e, std::vector<Binding>& bs) {
    const Expr* v = value(e, bs);
    if (isAtom(v)) return v;
    Var* t = b_.var("t", nullptr, e->loc);
    t->type = e->type;
    bs.push_back({t, v, nullptr});
    return t;
  }

  template <class T>
  T* typed(T* n, const Expr* from) {
    n->type = from->type;
    return n;
  }

  // `e` as an ANF value, its prerequisites appended to `bs`.
  const Expr* value(const Expr* e, std::vector<Binding>& bs) {
    switch (e->kind) {
      case ExprKind::Var:
      case ExprKind::GlobalVar:
      case ExprKind::Constant:
      case ExprKind::Ctor:
      case ExprKind::Op: return e;
      case ExprKind::Let: {
        // Flatten the chain iteratively: 10^5 bindings cost no stack.
        while (e->kind == ExprKind::Let) {
          auto* l = static_cast<const Let*>(e);
          const Expr* v = value(l->value, bs);
          bs.push_back({l->var, v, l});
          e = l->body;
        }
        return value(e, bs);
      }
      case ExprKind::Call: {
        auto* c = static_cast<const Call*>(e);
        const Expr* callee = c->callee;
        bool primitive = callee->kind == ExprKind::Function && static_cast<const Function*>(callee)->primitive;
        if (!primitive) callee = atom(callee, bs);
        std::vector<const Expr*> args;
        for (const Expr* a : c->args) args.push_back(atom(a, bs));
        return typed(b_.call(callee, args, c->attrs, c->loc), c);
      }
      case ExprKind::Tuple: {
        auto* t = static_cast<const Tuple*>(e);
        std::vector<const Expr*> fields;
        for (const Expr* f : t->fields) fields.push_back(atom(f, bs));
        return typed(b_.tuple(fields, t->loc), t);
      }
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        return typed(b_.tupleGet(atom(g->tuple, bs), g->index, g->loc), g);
      }
      case ExprKind::RefOp: {
        auto* r = static_cast<const RefOp*>(e);
        std::vector<const Expr*> args;
        for (const Expr* a : r->args) args.push_back(atom(a, bs));
        return typed(b_.refOp(r->op, args, r->loc), r);
      }
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        const Expr* c = atom(i->cond, bs);
        return typed(b_.ifElse(c, block(i->thenBranch), block(i->elseBranch), i->loc), i);
      }
      case ExprKind::Match: {
        auto* m = static_cast<const Match*>(e);
        const Expr* s = atom(m->scrutinee, bs);
        std::vector<Clause> clauses;
        for (const Clause& c : m->clauses) clauses.push_back({c.pattern, block(c.body)});
        return typed(b_.match(s, clauses, m->complete, m->loc), m);
      }
      case ExprKind::Function: {
        auto* f = static_cast<const Function*>(e);
        if (f->primitive) return e;
        Function* n = b_.function(f->typeParams, f->params, f->resultAnnotation, block(f->body), f->loc);
        n->closure = f->closure;
        n->attrs = f->attrs;
        return typed(n, f);
      }
    }
    return e;
  }

  Builder b_;
};

}  // namespace

std::unique_ptr<Module> toANF(const Module& m) {
  auto out = std::make_unique<Module>(m.arenaPtr(), m.file());
  for (const auto& t : m.typeDefs()) out->addTypeDef(t.def, t.fromPrelude);
  ANF anf(m.arena());
  for (const auto& g : m.functions()) {
    auto* fn = static_cast<const Function*>(anf.block(g.fn));
    out->addFunction(g.var, fn, g.fromPrelude);
  }
  return out;
}

}  // namespace kiln::compiler
