// FunctionDataflow and freeVariables: one iterative walk each (let chains may be long).
#include "compiler/partition/dataflow.h"

#include <algorithm>

#include "compiler/ir/visit.h"

namespace kiln::partition {

using namespace ir;

FunctionDataflow::FunctionDataflow(const Function* fn) {
  struct Item {
    const Expr* e;
    int scope;
    bool done;
    const Call* user = nullptr;  // the call whose argument this is
  };
  int scopes = 0;
  std::vector<Item> stack{{fn->body, 0, false}};
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    const Expr* e = it.e;
    if (it.done) {
      if (e->kind == ExprKind::Call) calls_.push_back(static_cast<const Call*>(e));
      continue;
    }
    if (e->kind == ExprKind::Var) {
      ++varUses_[static_cast<const Var*>(e)];
      if (it.user) varArgUsers_[static_cast<const Var*>(e)].push_back(it.user);
      continue;
    }
    if (++parents_[e] > 1) continue;  // shared: walked once
    if (it.user) argUser_[e] = it.user;
    scope_[e] = it.scope;
    stack.push_back({e, it.scope, true});
    // Children pushed in reverse so they pop in evaluation order.
    std::vector<Item> kids;
    switch (e->kind) {
      case ExprKind::Let: {
        auto* l = static_cast<const Let*>(e);
        lets_[l->var] = l;
        boundBy_[l->value] = l->var;
        kids = {{l->value, it.scope, false}, {l->body, it.scope, false}};
        break;
      }
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        kids = {{i->cond, it.scope, false}, {i->thenBranch, ++scopes, false}, {i->elseBranch, ++scopes, false}};
        break;
      }
      case ExprKind::Match: {
        auto* m = static_cast<const Match*>(e);
        kids.push_back({m->scrutinee, it.scope, false});
        for (const Clause& c : m->clauses) kids.push_back({c.body, ++scopes, false});
        break;
      }
      case ExprKind::Function:
        if (!isPrimitiveFunction(e)) kids.push_back({static_cast<const Function*>(e)->body, ++scopes, false});
        break;
      case ExprKind::Call: {
        // A composite's body is the library's business, not the program's: only its call is seen.
        auto* c = static_cast<const Call*>(e);
        bool composite = c->callee->kind == ExprKind::Function && static_cast<const Function*>(c->callee)->attrs &&
                         static_cast<const Function*>(c->callee)->attrs->find("Composite");
        forEachChild(e, [&](const Expr* x) {
          if (!(composite && x == c->callee)) kids.push_back({x, it.scope, false, x == c->callee ? nullptr : c});
        });
        break;
      }
      default: forEachChild(e, [&](const Expr* c) { kids.push_back({c, it.scope, false}); });
    }
    for (auto k = kids.rbegin(); k != kids.rend(); ++k) stack.push_back(*k);
  }
}

int FunctionDataflow::scopeOf(const Expr* e) const {
  auto it = scope_.find(e);
  return it == scope_.end() ? -1 : it->second;
}

bool FunctionDataflow::singleParent(const Expr* e) const {
  auto it = parents_.find(e);
  return it != parents_.end() && it->second == 1;
}

const Expr* FunctionDataflow::movable(const Var* v, int scope) const {
  auto l = lets_.find(v);
  if (l == lets_.end() || scopeOf(l->second) != scope) return nullptr;
  auto u = varUses_.find(v);
  if (u == varUses_.end() || u->second != 1) return nullptr;
  const Expr* value = l->second->value;
  if (value->kind != ExprKind::Call && value->kind != ExprKind::Tuple && value->kind != ExprKind::TupleGet) return nullptr;
  return singleParent(value) ? value : nullptr;
}

std::vector<const Call*> FunctionDataflow::callUsers(const Call* x, int scope, const Var** via) const {
  *via = nullptr;
  std::vector<const Call*> users;
  if (!singleParent(x) || scopeOf(x) != scope) return users;
  auto b = boundBy_.find(x);
  if (b != boundBy_.end()) {
    const Var* v = b->second;
    auto l = lets_.find(v);
    auto refs = varArgUsers_.find(v);
    auto n = varUses_.find(v);
    if (l == lets_.end() || scopeOf(l->second) != scope || refs == varArgUsers_.end() || n == varUses_.end() ||
        refs->second.size() != static_cast<size_t>(n->second))
      return users;  // some reference is not an argument of a call
    *via = v;
    for (const Call* u : refs->second)
      if (std::find(users.begin(), users.end(), u) == users.end()) users.push_back(u);
    return users;
  }
  auto u = argUser_.find(x);
  if (u != argUser_.end()) users.push_back(u->second);
  return users;
}

std::vector<const Var*> freeVariables(const Function* fn) {
  std::unordered_set<const Var*> bound(fn->params.begin(), fn->params.end());
  std::vector<const Var*> refs, out;
  std::vector<const Pattern*> patterns;
  std::unordered_set<const Expr*> seen;
  std::vector<const Expr*> stack{fn->body};
  while (!stack.empty()) {
    const Expr* e = stack.back();
    stack.pop_back();
    if (e->kind == ExprKind::Var) {
      refs.push_back(static_cast<const Var*>(e));
      continue;
    }
    if (!seen.insert(e).second) continue;
    switch (e->kind) {
      case ExprKind::Let: bound.insert(static_cast<const Let*>(e)->var); break;
      case ExprKind::Match:
        for (const Clause& c : static_cast<const Match*>(e)->clauses) patterns.push_back(c.pattern);
        break;
      case ExprKind::Function:
        for (const Var* p : static_cast<const Function*>(e)->params) bound.insert(p);
        // A primitive function's body is closed over its own parameters: walk it too.
        if (isPrimitiveFunction(e)) stack.push_back(static_cast<const Function*>(e)->body);
        break;
      case ExprKind::Call: {
        auto* c = static_cast<const Call*>(e);
        if (isPrimitiveFunction(c->callee)) stack.push_back(c->callee);
        break;
      }
      default: break;
    }
    forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
  }
  for (const Pattern* p : patterns) forEachPatternVar(p, [&](const Var* v) { bound.insert(v); });
  std::unordered_set<const Var*> reported;
  for (const Var* v : refs)
    if (!bound.count(v) && reported.insert(v).second) out.push_back(v);
  return out;
}

}  // namespace kiln::partition
