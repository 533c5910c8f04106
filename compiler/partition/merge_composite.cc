// mergeComposite: matched groups become calls of Composite= function literals.
#include "compiler/partition/merge_composite.h"

#include <unordered_map>
#include <unordered_set>

#include "compiler/ir/mutator.h"
#include "compiler/partition/dataflow.h"
#include "compiler/partition/rewrite_util.h"

namespace kiln::partition {

using namespace ir;

std::string compositeName(const Call* c) {
  if (c->callee->kind != ExprKind::Function) return "";
  const ops::AttrMap* attrs = static_cast<const Function*>(c->callee)->attrs;
  const ops::AttrValue* v = attrs ? attrs->find("Composite") : nullptr;
  return v && v->kind == ops::AttrValue::Kind::String ? v->s : "";
}

bool partitionable(const GlobalFunction& g) {
  if (g.fromPrelude || g.fn->primitive) return false;
  return !(g.fn->attrs && g.fn->attrs->find("Compiler"));
}

namespace {

struct Composite {
  std::string name;
  PatternMatch match;
};

// Where each pattern matches in one function (see the header for the order).
struct CompositeFinder {
  std::unordered_map<const Expr*, Composite> byRoot;
  std::unordered_map<const Var*, const Expr*> absorbed;  // let-bound variable -> its value, moved into a group

  CompositeFinder(const Function* fn, const std::vector<CompositePattern>& patterns) {
    FunctionDataflow df(fn);
    std::unordered_set<const Expr*> claimed;
    for (const CompositePattern& p : patterns) {
      for (auto it = df.calls().rbegin(); it != df.calls().rend(); ++it) {
        const Call* c = *it;
        if (claimed.count(c)) continue;
        int scope = df.scopeOf(c);
        VarResolver resolve = [&](const Var* v) { return df.movable(v, scope); };
        std::function<bool(const Expr*)> interiorOk = [&](const Expr* x) {
          return !claimed.count(x) && df.singleParent(x) && df.scopeOf(x) == scope;
        };
        PatternMatch m;
        if (!matchPattern(p.pattern, c, resolve, interiorOk, m)) continue;
        for (const Expr* x : m.interior) claimed.insert(x);
        for (const Var* v : m.absorbed) absorbed[v] = df.movable(v, scope);
        byRoot[c] = Composite{p.name, std::move(m)};
      }
    }
  }
};

class CompositeRewriter : public ExprMutator {
 public:
  CompositeRewriter(Arena& a, const CompositeFinder& found) : ExprMutator(a), a_(a), found_(found) {}

 protected:
  const Expr* visit(const Expr* e) override {
    if (e->kind == ExprKind::Let)
      return rebuildLetChain(builder(), static_cast<const Let*>(e), [&](const Var* v) { return found_.absorbed.count(v) > 0; },
                             [&](const Expr* x) { return mutate(x); });
    auto it = found_.byRoot.find(e);
    if (it != found_.byRoot.end()) return composite(it->second);
    return ExprMutator::visit(e);
  }

 private:
  const Expr* composite(const Composite& c) {
    const PatternMatch& m = c.match;
    std::string prefix = "FunctionVar_" + std::to_string(count_++) + "_";
    std::unordered_map<const Expr*, const Expr*> params;
    std::vector<const Var*> paramList;
    std::vector<const Expr*> args;
    for (const Expr* in : m.inputs) {
      Var* p = builder().var(a_.str(prefix + std::to_string(paramList.size())), in->type, in->loc);
      p->type = in->type;
      params[in] = p;
      paramList.push_back(p);
      args.push_back(mutate(in));
    }
    const Expr* body = substituteGroup(builder(), m.root, params, found_.absorbed);
    auto* attrs = a_.own<ops::AttrMap>();
    attrs->set("Composite", ops::AttrValue::ofString(c.name));
    attrs->set("PartitionedFromPattern", ops::AttrValue::ofString(partitionedFromPattern(m)));
    const Expr* call = makeCall(builder(), makeFunction(builder(), paramList, body, attrs, m.root->loc), args, m.root);
    return call;
  }

  Arena& a_;
  const CompositeFinder& found_;
  int count_ = 0;
};

}  // namespace

std::unique_ptr<Module> mergeComposite(const Module& m, const std::vector<CompositePattern>& patterns) {
  return rebuildModule(m, [&](const GlobalFunction& g) -> const Function* {
    if (patterns.empty() || !partitionable(g)) return g.fn;
    CompositeFinder found(g.fn, patterns);
    if (found.byRoot.empty()) return g.fn;
    CompositeRewriter rw(m.arena(), found);
    return withBody(Builder(m.arena()), g.fn, rw.mutate(g.fn->body));
  });
}

}  // namespace kiln::partition
