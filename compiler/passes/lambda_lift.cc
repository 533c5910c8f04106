// Lambda lifting: nested functions become globals plus captured values.
#include "compiler/passes/lambda_lift.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/mutator.h"
#include "compiler/ir/visit.h"
#include "compiler/passes/to_anf.h"

namespace kiln::compiler {

using namespace kiln::ir;

size_t capturedCount(const Function* global) {
  return global->body->kind == ExprKind::Function && static_cast<const Function*>(global->body)->closure
             ? global->params.size()
             : 0;
}

namespace {

// Free variables of a function, in order of first reference. Iterative.
std::vector<const Var*> freeVars(const Function* fn) {
  std::unordered_set<const Var*> bound(fn->params.begin(), fn->params.end());
  std::unordered_set<const Var*> seen;
  std::vector<const Var*> out;
  std::vector<const Expr*> stack{fn->body};
  auto bindPattern = [&](const Pattern* root) {
    std::vector<const Pattern*> ps{root};
    while (!ps.empty()) {
      const Pattern* p = ps.back();
      ps.pop_back();
      if (p->kind == PatternKind::Var) bound.insert(static_cast<const PatternVar*>(p)->var);
      if (p->kind == PatternKind::Ctor)
        for (auto* a : static_cast<const PatternCtor*>(p)->args) ps.push_back(a);
      if (p->kind == PatternKind::Tuple)
        for (auto* a : static_cast<const PatternTuple*>(p)->fields) ps.push_back(a);
    }
  };
  // Binders are unique nodes, so collecting all binders and all references in one
  // walk gives the same answer as tracking scopes.
  std::vector<const Var*> refs;
  while (!stack.empty()) {
    const Expr* e = stack.back();
    stack.pop_back();
    if (e->kind == ExprKind::Var) refs.push_back(static_cast<const Var*>(e));
    if (e->kind == ExprKind::Let) bound.insert(static_cast<const Let*>(e)->var);
    if (e->kind == ExprKind::Match)
      for (const Clause& c : static_cast<const Match*>(e)->clauses) bindPattern(c.pattern);
    if (e->kind == ExprKind::Function && !isPrimitiveFunction(e))
      for (const Var* p : static_cast<const Function*>(e)->params) bound.insert(p);
    // Children pushed in reverse, so references are seen in evaluation order.
    std::vector<const Expr*> children;
    forEachChild(e, [&](const Expr* c) { children.push_back(c); });
    stack.insert(stack.end(), children.rbegin(), children.rend());
  }
  for (const Var* v : refs)
    if (!bound.count(v) && seen.insert(v).second) out.push_back(v);
  return out;
}

class Lifter : public ExprMutator {
 public:
  Lifter(Module& out, std::string owner, bool fromPrelude)
      : ExprMutator(out.arena()), out_(out), owner_(std::move(owner)), fromPrelude_(fromPrelude) {}

  // Self-references inside a lifted recursive lambda: the var and how to rewrite it.
  struct SelfRef {
    const Var* var;
    const GlobalVar* global;
    std::vector<const Var*> captured;
  };

 protected:
  const Expr* visit(const Expr* e) override {
    switch (e->kind) {
      case ExprKind::Let: return visitLetChain(static_cast<const Let*>(e));
      case ExprKind::Function: {
        auto* f = static_cast<const Function*>(e);
        if (f->primitive) return e;
        return lift(f, nullptr);
      }
      case ExprKind::Ctor: return ctorValue(e, static_cast<const CtorRef*>(e));
      case ExprKind::Call: {
        auto* c = static_cast<const Call*>(e);
        // A direct call of the recursive lambda being lifted.
        if (c->callee->kind == ExprKind::Var)
          for (const SelfRef& s : self_)
            if (c->callee == s.var) return directSelfCall(c, s);
        // Constructors and operators in callee position stay as they are.
        if (c->callee->kind == ExprKind::Ctor || c->callee->kind == ExprKind::Op) {
          std::vector<const Expr*> args;
          bool changed = false;
          for (const Expr* a : c->args) {
            args.push_back(mutate(a));
            changed |= args.back() != a;
          }
          return changed ? typed(builder().call(c->callee, args, c->attrs, c->loc), c) : e;
        }
        return ExprMutator::visit(e);
      }
      default: return ExprMutator::visit(e);
    }
  }

 private:
  const Expr* visitLetChain(const Let* first) {
    std::vector<std::pair<const Let*, const Expr*>> chain;
    const Expr* e = first;
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      const Expr* v = l->value;
      if (v->kind == ExprKind::Function && !static_cast<const Function*>(v)->primitive)
        v = lift(static_cast<const Function*>(v), l->var);
      else
        v = mutate(v);
      chain.emplace_back(l, v);
      e = l->body;
    }
    const Expr* body = mutate(e);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Let* l = it->first;
      body = typed(builder().let(l->var, it->second, body, l->graphStyle, l->loc), l);
    }
    return body;
  }

  // A constructor used as a value: nullary ones stay (the emitter builds them);
  // others become a wrapper global.
  const Expr* ctorValue(const Expr* e, const CtorRef* c) {
    if (c->ctor->fields.empty()) return e;
    // One wrapper per constructor, not per name: a program's own `Cons` and the
    // prelude's are different constructors (Cons_fn, Cons_fn1, ...).
    auto wraps = [&](const Function* fn) {
      auto* call = fn->body->kind == ExprKind::Call ? static_cast<const Call*>(fn->body) : nullptr;
      return call && call->callee->kind == ExprKind::Ctor && static_cast<const CtorRef*>(call->callee)->ctor == c->ctor;
    };
    std::string name = std::string(c->ctor->name) + "_fn";
    for (int n = 1; out_.findFunction(name) && !wraps(out_.findFunction(name)->fn); ++n)
      name = std::string(c->ctor->name) + "_fn" + std::to_string(n);
    if (!out_.findFunction(name)) {
      std::vector<const Var*> params;
      std::vector<const Expr*> args;
      for (size_t i = 0; i < c->ctor->fields.size(); ++i) {
        Var* p = builder().var(builder().arena().str("f" + std::to_string(i)), nullptr, c->loc);
        p->type = c->ctor->fields[i];
        params.push_back(p);
        args.push_back(p);
      }
      Call* body = builder().call(c, args, nullptr, c->loc);
      if (auto* ft = asFunc(e->type)) body->type = ft->result;
      Function* fn = builder().function({}, params, nullptr, body, c->loc);
      fn->type = e->type;
      out_.addFunction(builder().globalVar(builder().arena().str(name), c->loc), fn, false, true);
    }
    GlobalVar* g = builder().globalVar(out_.findFunction(name)->var->name, c->loc);
    g->type = e->type;
    return g;
  }

  const Expr* directSelfCall(const Call* c, const SelfRef& s) {
    std::vector<const Expr*> args(s.captured.begin(), s.captured.end());
    for (const Expr* a : c->args) args.push_back(mutate(a));
    return typed(builder().call(s.global, args, nullptr, c->loc), c);
  }

  // Lifts `f` (bound to `self` when let-bound, so it may call itself).
  const Expr* lift(const Function* f, const Var* self) {
    // A reference to an enclosing recursive lambda also needs what its direct
    // self-calls pass: that lambda's captured values.
    std::vector<const Var*> captured;
    std::unordered_set<const Var*> have;
    auto add = [&](const Var* v) {
      if (v != self && have.insert(v).second) captured.push_back(v);
    };
    for (const Var* v : freeVars(f)) {
      for (const SelfRef& s : self_)
        if (s.var == v)
          for (const Var* c : s.captured) add(c);
      add(v);
    }
    std::string name = owner_ + "_lambda" + std::to_string(counter_++);
    while (out_.findFunction(name)) name += "_";
    GlobalVar* g = builder().globalVar(builder().arena().str(name), f->loc);
    g->type = f->type;

    // Rewrite the body with self-calls made direct; other self-references rebuild
    // the closure at the top of the body.
    if (self) self_.push_back({self, g, captured});
    Lifter inner(out_, name, fromPrelude_);
    inner.self_ = self_;
    const Expr* body = inner.mutate(f->body);
    if (self) self_.pop_back();
    if (self && references(body, self)) {
      const Expr* value = closureValue(g, captured, f);
      body = typed(builder().let(self, value, body, false, f->loc), body);
    }

    Function* lifted;
    if (captured.empty()) {
      lifted = builder().function(f->typeParams, f->params, f->resultAnnotation, body, f->loc);
      lifted->type = f->type;
    } else {
      Function* inner_fn = builder().function(f->typeParams, f->params, f->resultAnnotation, body, f->loc);
      inner_fn->type = f->type;
      inner_fn->closure = true;
      lifted = builder().function({}, captured, nullptr, inner_fn, f->loc);
      std::vector<const Type*> ps;
      for (const Var* v : captured) ps.push_back(v->type);
      lifted->type = funcType(builder().arena(), ps, f->type);
    }
    out_.addFunction(g, lifted, fromPrelude_, true);
    return closureValue(g, captured, f);
  }

  const Expr* closureValue(const GlobalVar* g, const std::vector<const Var*>& captured, const Function* f) {
    if (captured.empty()) return g;
    std::vector<const Expr*> args(captured.begin(), captured.end());
    return typed(builder().call(g, args, nullptr, f->loc), f);
  }

  static bool references(const Expr* root, const Var* v) {
    std::vector<const Expr*> stack{root};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e == v) return true;
      forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
    return false;
  }

  Module& out_;
  std::string owner_;
  bool fromPrelude_;
  int counter_ = 0;
  std::vector<SelfRef> self_;
};

}  // namespace

std::unique_ptr<Module> lambdaLift(const Module& m) {
  auto out = std::make_unique<Module>(m.arenaPtr(), m.file());
  for (const auto& t : m.typeDefs()) out->addTypeDef(t.def, t.fromPrelude);
  for (const auto& g : m.functions()) out->addFunction(g.var, g.fn, g.fromPrelude, g.lifted);
  for (const auto& g : m.functions()) {
    Lifter lifter(*out, std::string(g.var->name), g.fromPrelude);
    const Expr* body = lifter.mutate(g.fn->body);
    if (body == g.fn->body) continue;
    Builder b(out->arena());
    Function* fn = b.function(g.fn->typeParams, g.fn->params, g.fn->resultAnnotation, body, g.fn->loc);
    fn->type = g.fn->type;
    out->addFunction(g.var, fn, g.fromPrelude, g.lifted);
  }
  return out;
}

}  // namespace kiln::compiler
