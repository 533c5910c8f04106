// hoistLoopProjections: a counting loop's input projection, computed once for every step.
#include "compiler/passes/hoist_projections.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/mutator.h"
#include "compiler/ir/type.h"
#include "compiler/ir/visit.h"
#include "kernel_ir/attrs.h"
#include "ops/registry.h"

namespace kiln::compiler {

using namespace ir;

namespace {

// The largest projection (all steps' blocks) hoisted when its size is static.
constexpr double kMaxProjectionBytes = 256.0 * (1 << 20);

// Every node under `root` once (iteratively: let chains may be long), with the
// variables bound inside it (parameters, lets, pattern variables).
struct FunctionScan {
  std::unordered_set<const Var*> bound;
  std::vector<const Call*> calls;
  std::unordered_map<const Var*, const Let*> lets;  // each let-bound variable's binding
  std::unordered_map<const Var*, int> uses;         // references to each variable

  explicit FunctionScan(const Function* fn) {
    for (const Var* p : fn->params) bound.insert(p);
    std::vector<const Expr*> stack;
    std::unordered_set<const Expr*> seen;
    // Variables are counted per reference (they are shared nodes), everything
    // else walked once.
    auto push = [&](const Expr* e) {
      if (!e) return;
      if (e->kind == ExprKind::Var) ++uses[static_cast<const Var*>(e)];
      else if (seen.insert(e).second) stack.push_back(e);
    };
    std::vector<const Pattern*> patterns;
    push(fn->body);
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      switch (e->kind) {
        case ExprKind::Let: {
          auto* l = static_cast<const Let*>(e);
          bound.insert(l->var);
          lets[l->var] = l;
          break;
        }
        case ExprKind::Call: calls.push_back(static_cast<const Call*>(e)); break;
        case ExprKind::Match:
          for (const Clause& c : static_cast<const Match*>(e)->clauses) patterns.push_back(c.pattern);
          break;
        case ExprKind::Function:
          for (const Var* p : static_cast<const Function*>(e)->params) bound.insert(p);
          break;
        default: break;
      }
      forEachChild(e, push);
    }
    for (const Pattern* p : patterns) forEachPatternVar(p, [&](const Var* v) { bound.insert(v); });
  }

  // What a let-bound variable names (followed through lets), else `e`.
  const Expr* valueOf(const Expr* e) const {
    while (e->kind == ExprKind::Var) {
      auto it = lets.find(static_cast<const Var*>(e));
      if (it == lets.end()) break;
      e = it->second->value;
    }
    return e;
  }

  // A value the function reads but does not compute: a variable bound outside it, or a literal.
  bool outside(const Expr* e) const {
    if (e->kind == ExprKind::Constant) return true;
    return e->kind == ExprKind::Var && !bound.count(static_cast<const Var*>(e));
  }
};

// Replaces given nodes by others (and rebuilds what holds them); a let whose
// node maps to its own body is dropped.
class Replacer : public ExprMutator {
 public:
  Replacer(Arena& a, const std::unordered_map<const Expr*, const Expr*>& with) : ExprMutator(a), with_(with) {}

 protected:
  const Expr* visit(const Expr* e) override {
    auto it = with_.find(e);
    if (it == with_.end()) return ExprMutator::visit(e);
    if (e->kind == ExprKind::Let && it->second == static_cast<const Let*>(e)->body) return mutate(it->second);
    return it->second;
  }

 private:
  const std::unordered_map<const Expr*, const Expr*>& with_;
};

class Hoister : public ExprMutator {
 public:
  explicit Hoister(Arena& a) : ExprMutator(a), arena_(a) {}

 protected:
  const Expr* visit(const Expr* e) override {
    if (e->kind == ExprKind::Function && static_cast<const Function*>(e)->primitive) return e;
    if (e->kind != ExprKind::Let) return ExprMutator::visit(e);
    // The chain, with each function's hoisted projections bound before it.
    std::vector<const Let*> chain;
    const Expr* cur = e;
    while (cur->kind == ExprKind::Let) {
      chain.push_back(static_cast<const Let*>(cur));
      cur = chain.back()->body;
    }
    const Expr* body = mutate(cur);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Let* l = *it;
      std::vector<std::pair<const Var*, const Expr*>> hoisted;
      const Expr* value = l->value;
      if (value->kind == ExprKind::Function && !static_cast<const Function*>(value)->primitive)
        value = hoist(l->var, static_cast<const Function*>(value), hoisted);
      value = mutate(value);
      const Expr* rebuilt =
          value == l->value && body == l->body ? l : typed(builder().let(l->var, value, body, l->graphStyle, l->loc), l);
      for (auto h = hoisted.rbegin(); h != hoisted.rend(); ++h)
        rebuilt = typed(builder().let(h->first, h->second, rebuilt, false, l->loc), rebuilt);
      body = rebuilt;
    }
    return body;
  }

 private:
  // The parameters `fn` counts with: its recursive calls (through `self`) pass
  // the parameter plus a literal in that position.
  std::unordered_set<const Var*> countingParams(const Var* self, const Function* fn, const FunctionScan& scan) const {
    std::unordered_set<const Var*> out;
    for (const Call* c : scan.calls) {
      if (c->callee != self || c->args.size() != fn->params.size()) continue;
      for (size_t i = 0; i < c->args.size(); ++i) {
        const Call* add = opCall(c->args[i], "add");
        if (!add || add->args.size() != 2) continue;
        const Var* p = fn->params[i];
        if ((add->args[0] == p && add->args[1]->kind == ExprKind::Constant) ||
            (add->args[1] == p && add->args[0]->kind == ExprKind::Constant))
          out.insert(p);
      }
    }
    return out;
  }

  const Call* call(const char* op, std::vector<const Expr*> args, const ops::AttrMap* attrs, const Type* type, SourceLoc loc) {
    Call* c = builder().call(builder().op(ops::findOp(op), loc), args, attrs, loc);
    c->type = type;
    return c;
  }

  const ops::AttrMap* newshape(std::vector<int64_t> dims) {
    auto* attrs = arena_.own<ops::AttrMap>();
    std::vector<ops::AttrValue> list;
    for (int64_t d : dims) list.push_back(ops::AttrValue::ofInt(d));
    attrs->set("newshape", ops::AttrValue::ofList(std::move(list)));
    return attrs;
  }

  // `fn` with its projections replaced by blocks of products bound before it
  // (appended to `hoisted`); `fn` itself when there are none.
  const Expr* hoist(const Var* self, const Function* fn, std::vector<std::pair<const Var*, const Expr*>>& hoisted) {
    FunctionScan scan(fn);
    std::unordered_set<const Var*> counters = countingParams(self, fn, scan);
    if (counters.empty()) return fn;
    std::unordered_map<const Expr*, const Expr*> replace;
    for (const Call* dense : scan.calls) {
      if (!opCall(dense, "nn.dense") || dense->args.size() != 2 || replace.count(dense)) continue;
      const Call* take = opCall(scan.valueOf(dense->args[0]), "take");
      if (!take || take->args.size() != 2 || !scan.outside(take->args[0]) || take->args[0]->kind != ExprKind::Var ||
          !scan.outside(dense->args[1]))
        continue;
      if (take->args[1]->kind != ExprKind::Var || !counters.count(static_cast<const Var*>(take->args[1]))) continue;
      ops::AttrMap none;
      ops::AttrReader attrs("take", take->attrs ? *take->attrs : none);
      if (!attrs.has("axis") || attrs.getInt("axis", -1) != 0) continue;
      const TensorType* xs = asTensor(take->args[0]->type);
      const TensorType* out = asTensor(dense->type);
      const TensorType* step = asTensor(take->type);
      if (!xs || !out || !step || xs->rank() != 3 || out->rank() != 2 || step->rank() != 2) continue;
      int64_t rows = xs->shape[1], k = xs->shape[2], n = out->shape[1];
      if (rows == kAnyDim || k == kAnyDim || n == kAnyDim) continue;
      int64_t steps = xs->shape[0];
      int64_t flat = steps == kAnyDim ? kAnyDim : steps * rows;
      // Every step's block is held at once: not where that is known to be large.
      if (flat != kAnyDim && static_cast<double>(flat) * static_cast<double>(n) * 4 > kMaxProjectionBytes) continue;
      SourceLoc loc = dense->loc;
      const Expr* x2 = call("reshape", {take->args[0]}, newshape({-1, k}), tensorType(arena_, xs->dtype, std::vector<int64_t>{flat, k}), loc);
      const Expr* product = call("nn.dense", {x2, dense->args[1]}, dense->attrs, tensorType(arena_, out->dtype, std::vector<int64_t>{flat, n}), loc);
      const Type* projType = tensorType(arena_, out->dtype, std::vector<int64_t>{steps, rows, n});
      const Expr* proj = call("reshape", {product}, newshape({-1, rows, n}), projType, loc);
      std::string name = std::string(static_cast<const Var*>(take->args[0])->name) + "_projected" + std::to_string(hoisted.size());
      Var* v = builder().var(arena_.str(name), nullptr, loc);
      v->type = projType;
      hoisted.emplace_back(v, proj);
      replace[dense] = call("take", {v, take->args[1]}, take->attrs, dense->type, loc);
      // The step's slice, bound by a let the product alone used, is no longer needed.
      if (dense->args[0]->kind == ExprKind::Var) {
        auto slice = static_cast<const Var*>(dense->args[0]);
        auto binding = scan.lets.find(slice);
        if (binding != scan.lets.end() && binding->second->value == take && scan.uses[slice] == 1)
          replace[binding->second] = binding->second->body;
      }
    }
    if (replace.empty()) return fn;
    Replacer r(arena_, replace);
    return r.mutate(fn);
  }

  Arena& arena_;
};

}  // namespace

std::unique_ptr<Module> hoistLoopProjections(const Module& m) {
  auto out = std::make_unique<Module>(m.arenaPtr(), m.file());
  for (const auto& t : m.typeDefs()) out->addTypeDef(t.def, t.fromPrelude);
  Hoister hoister(m.arena());
  for (const auto& g : m.functions())
    out->addFunction(g.var, static_cast<const Function*>(hoister.mutate(g.fn)), g.fromPrelude);
  return out;
}

}  // namespace kiln::compiler
