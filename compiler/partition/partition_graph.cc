// partitionGraph: regions become Compiler= global functions.
#include "compiler/partition/partition_graph.h"

#include <functional>
#include <unordered_set>

#include "compiler/ir/mutator.h"
#include "compiler/partition/dataflow.h"
#include "compiler/partition/rewrite_util.h"
#include "kiln/error.h"

namespace kiln::partition {

using namespace ir;

namespace {

class RegionRewriter : public ExprMutator {
 public:
  RegionRewriter(const Module& m, Module& out, const RegionPlan& plan, std::unordered_set<std::string>& names)
      : ExprMutator(m.arena()), m_(m), out_(out), a_(m.arena()), plan_(plan), names_(names) {}

 protected:
  const Expr* visit(const Expr* e) override {
    if (e->kind == ExprKind::Let)
      return rebuildLetChain(builder(), static_cast<const Let*>(e), [&](const Var* v) { return plan_.absorbed.count(v) > 0; },
                             [&](const Expr* x) { return mutate(x); });
    if (e->kind == ExprKind::Call) {
      auto r = plan_.regionOf.find(static_cast<const Call*>(e));
      if (r != plan_.regionOf.end() && plan_.regions[static_cast<size_t>(r->second)].root == e)
        return regionCall(plan_.regions[static_cast<size_t>(r->second)], r->second);
    }
    return ExprMutator::visit(e);
  }

 private:
  // The member of region `id` that `a` is (written in place or through a variable taken over), or null.
  const Call* memberOf(const Expr* a, int id) const {
    if (a->kind == ExprKind::Var) {
      auto ab = plan_.absorbed.find(static_cast<const Var*>(a));
      if (ab == plan_.absorbed.end()) return nullptr;
      a = ab->second;
    }
    if (a->kind != ExprKind::Call) return nullptr;
    auto r = plan_.regionOf.find(static_cast<const Call*>(a));
    return r != plan_.regionOf.end() && r->second == id ? static_cast<const Call*>(a) : nullptr;
  }

  // A region's inputs; one per region being built (an input may hold another region).
  struct Inputs {
    std::unordered_map<const Expr*, const Expr*> params;  // original expression -> parameter
    std::vector<const Var*> list;
    std::vector<const Expr*> args;  // the rewritten expressions the call site passes
    std::unordered_set<const Call*> seen;  // members visited (a region is a DAG: one may feed several)
  };

  void collectInputs(const Call* c, int id, Inputs& in) {
    if (!in.seen.insert(c).second) return;
    if (c->callee->kind != ExprKind::Op && c->callee->kind != ExprKind::GlobalVar && c->callee->kind != ExprKind::Function)
      input(c->callee, in);
    for (const Expr* a : c->args) {
      if (const Call* m = memberOf(a, id)) collectInputs(m, id, in);
      else if (a->kind != ExprKind::Constant) input(a, in);  // a literal stays in the body
    }
  }

  // The region's body over its parameters. A member that feeds several others is
  // computed once, bound by a graph binding (`%0 = ...`), in evaluation order.
  const Expr* regionBody(const Region& r, int id, const Inputs& in) {
    std::unordered_map<const Call*, int> uses;
    for (const Call* m : r.members)
      for (const Expr* a : m->args)
        if (const Call* x = memberOf(a, id)) ++uses[x];
    std::unordered_map<const Expr*, const Expr*> done;
    std::vector<std::pair<const Var*, const Expr*>> bindings;
    std::function<const Expr*(const Expr*)> build = [&](const Expr* e) -> const Expr* {
      auto p = in.params.find(e);
      if (p != in.params.end()) return p->second;
      const Call* m = memberOf(e, id);
      if (!m) return e;  // a literal
      if (auto d = done.find(m); d != done.end()) return d->second;
      std::vector<const Expr*> args;
      for (const Expr* a : m->args) args.push_back(build(a));
      auto pc = in.params.find(m->callee);
      Call* c = builder().call(pc == in.params.end() ? m->callee : pc->second, args, m->attrs, m->loc);
      c->type = m->type;
      const Expr* result = c;
      if (uses[m] > 1) {
        Var* v = builder().var(a_.str(std::to_string(bindings.size())), nullptr, m->loc);
        v->type = m->type;
        bindings.emplace_back(v, c);
        result = v;
      }
      return done[m] = result;
    };
    const Expr* body = build(r.root);
    for (size_t i = bindings.size(); i-- > 0;) {
      Let* l = builder().let(bindings[i].first, bindings[i].second, body, /*graphStyle=*/true, r.root->loc);
      l->type = body->type;
      body = l;
    }
    return body;
  }

  void input(const Expr* e, Inputs& in) {
    if (in.params.count(e)) return;
    std::string name = e->kind == ExprKind::Var ? std::string(static_cast<const Var*>(e)->name)
                                                : "input" + std::to_string(in.list.size());
    Var* p = builder().var(a_.str(name), e->type, e->loc);
    p->type = e->type;
    in.params[e] = p;
    in.list.push_back(p);
    in.args.push_back(mutate(e));
  }

  std::string freshName(const Region& r) {
    for (int k = 0;; ++k) {
      std::string n = r.library + "_" + r.function + "_" + std::to_string(k);
      if (!m_.findFunction(n) && names_.insert(n).second) return n;
    }
  }

  const Expr* regionCall(const Region& r, int id) {
    Inputs in;
    collectInputs(r.root, id, in);
    const Expr* body = regionBody(r, id, in);
    std::string name = freshName(r);
    auto* attrs = a_.own<ops::AttrMap>();
    attrs->set("Primitive", ops::AttrValue::ofInt(1));
    attrs->set("Compiler", ops::AttrValue::ofString(r.library));
    attrs->set("global_symbol", ops::AttrValue::ofString(name));
    Function* fn = makeFunction(builder(), in.list, body, attrs, r.root->loc);
    std::vector<const Var*> free = freeVariables(fn);
    if (!free.empty())
      throw Error(m_.file(), r.root->loc, "internal error: partitioned function @" + name + " would use %" +
                                              std::string(free[0]->name) + " without a parameter for it");
    GlobalVar* gv = builder().globalVar(a_.str(name), r.root->loc);
    gv->type = fn->type;
    out_.addFunction(gv, fn);
    return makeCall(builder(), gv, in.args, r.root);
  }

  const Module& m_;
  Module& out_;
  Arena& a_;
  const RegionPlan& plan_;
  std::unordered_set<std::string>& names_;
};

}  // namespace

std::unique_ptr<Module> partitionGraph(const Module& m, const RegionPlan& plan) {
  std::unordered_set<std::string> names;
  return rebuildModule(m, [&](const GlobalFunction& g, Module& out) -> const Function* {
    bool any = false;
    for (const Region& r : plan.regions) any = any || r.function == g.var->name;
    if (!any) return g.fn;
    RegionRewriter rw(m, out, plan, names);
    return withBody(Builder(m.arena()), g.fn, rw.mutate(g.fn->body));
  });
}

}  // namespace kiln::partition
