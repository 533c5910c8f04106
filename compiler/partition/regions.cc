// annotateTargets and mergeCompilerRegions (see regions.h).
#include "compiler/partition/regions.h"

#include <algorithm>

#include "compiler/ir/printer.h"
#include "compiler/ir/visit.h"
#include "compiler/partition/dataflow.h"
#include "compiler/partition/merge_composite.h"

namespace kiln::partition {

using namespace ir;

namespace {

bool mentionsTypeParam(const Type* t) {
  if (!t) return true;  // unchecked: nothing can be said about it
  switch (t->kind) {
    case TypeKind::Param:
    case TypeKind::Meta: return true;
    case TypeKind::Tensor: return false;
    case TypeKind::Tuple:
      return std::any_of(asTuple(t)->fields.begin(), asTuple(t)->fields.end(), mentionsTypeParam);
    case TypeKind::Func: {
      auto* f = asFunc(t);
      return !f->typeParams.empty() || mentionsTypeParam(f->result) ||
             std::any_of(f->params.begin(), f->params.end(), mentionsTypeParam);
    }
    case TypeKind::Adt: return std::any_of(asAdt(t)->args.begin(), asAdt(t)->args.end(), mentionsTypeParam);
  }
  return true;
}

// Operators and composites: calls without effects, which a region may move.
bool movableCall(const Call* c) { return c->callee->kind == ExprKind::Op || !compositeName(c).empty(); }

std::string calleeName(const Call* c) {
  std::string comp = compositeName(c);
  if (!comp.empty()) return comp;
  if (c->callee->kind == ExprKind::Op) return static_cast<const OpRef*>(c->callee)->op->name;
  return printExpr(c->callee);
}

std::string where(const Module& m, const Expr* e) {
  return (m.file().empty() ? std::string("<input>") : m.file()) + ":" + std::to_string(e->loc.line) + ":" +
         std::to_string(e->loc.col);
}

}  // namespace

std::string RegionPlan::describe(const Expr* e) const {
  if (e->kind != ExprKind::Call) return "";
  auto* c = static_cast<const Call*>(e);
  auto l = library.find(c);
  if (l == library.end()) return "";
  auto r = regionOf.find(c);
  return r == regionOf.end() ? l->second : l->second + " region " + std::to_string(r->second);
}

RegionPlan annotateTargets(const Module& m, const PatternTable& table, const std::vector<std::string>& libraries) {
  RegionPlan plan;
  plan.libraries = libraries;
  auto wanted = [&](const std::string& lib) { return std::find(libraries.begin(), libraries.end(), lib) != libraries.end(); };
  std::function<bool(const Expr*)> noInterior = [](const Expr*) { return false; };
  for (const GlobalFunction& g : m.functions()) {
    if (!partitionable(g)) continue;
    FunctionDataflow df(g.fn);
    for (const Call* c : df.calls()) {
      if (c->callee->kind == ExprKind::Ctor || isPrimitiveFunction(c->callee)) continue;
      std::string lib;
      std::string comp = compositeName(c);
      if (!comp.empty()) {
        std::string prefix = comp.substr(0, comp.find('.'));
        if (wanted(prefix)) lib = prefix;
      } else {
        // Libraries in the order given; each library's rules in table order.
        for (const std::string& l : libraries) {
          for (const SupportRule& r : table.supports) {
            PatternMatch pm;
            if (r.library == l && matchPattern(r.pattern, c, nullptr, noInterior, pm)) {
              lib = l;
              break;
            }
          }
          if (!lib.empty()) break;
        }
      }
      if (lib.empty()) continue;
      bool poly = mentionsTypeParam(c->type) || std::any_of(c->args.begin(), c->args.end(), [](const Expr* a) {
                    return mentionsTypeParam(a->type);
                  });
      if (poly) {
        plan.notes.push_back(where(m, c) + ": " + calleeName(c) + " (supported by " + lib +
                             ") stays on Kiln: its type is polymorphic (mentions a type parameter)");
        continue;
      }
      plan.library[c] = lib;
    }
  }
  return plan;
}

void mergeCompilerRegions(const Module& m, RegionPlan& plan) {
  for (const GlobalFunction& g : m.functions()) {
    if (!partitionable(g)) continue;
    FunctionDataflow df(g.fn);
    std::vector<const Call*> annotated;
    for (const Call* c : df.calls())
      if (plan.library.count(c)) annotated.push_back(c);
    // Union-find over the annotated calls; each set is a region.
    std::unordered_map<const Call*, const Call*> parent;
    for (const Call* c : annotated) parent[c] = c;
    std::function<const Call*(const Call*)> find = [&](const Call* c) {
      while (parent[c] != c) c = parent[c] = parent[parent[c]];
      return c;
    };
    // A region's root is its one member used outside it; x (the root of its own
    // region) joins the region R of its users when every use of x is by a member
    // of R, all of one library, operators or composites, in x's scope. Walking
    // backwards (users first) settles chains and diamonds in one pass; repeat
    // until nothing joins.
    std::unordered_map<const Call*, bool> isRoot;
    for (const Call* c : annotated) isRoot[c] = true;
    for (bool changed = true; changed;) {
      changed = false;
      for (auto it = annotated.rbegin(); it != annotated.rend(); ++it) {
        const Call* x = *it;
        if (!isRoot[x] || !movableCall(x)) continue;
        const std::string& lib = plan.library[x];
        int scope = df.scopeOf(x);
        const Var* via = nullptr;
        std::vector<const Call*> users = df.callUsers(x, scope, &via);
        if (users.empty()) continue;
        const Call* region = nullptr;
        bool ok = true;
        for (const Call* u : users) {
          auto ul = plan.library.find(u);
          if (ul == plan.library.end() || ul->second != lib || !movableCall(u) || df.scopeOf(u) != scope ||
              (region && find(u) != region)) {
            ok = false;
            break;
          }
          region = find(u);
        }
        if (!ok || region == find(x)) continue;
        parent[find(x)] = region;
        isRoot[x] = false;
        if (via) plan.absorbed[via] = x;
        changed = true;
      }
    }
    // Regions in the order their roots are evaluated; members in evaluation order.
    std::unordered_map<const Call*, int> idOfSet;
    for (const Call* c : annotated) {
      if (!isRoot[c]) continue;
      idOfSet[find(c)] = static_cast<int>(plan.regions.size());
      plan.regions.push_back(Region{plan.library[c], std::string(g.var->name), c, {}});
    }
    for (const Call* c : annotated) {
      int id = idOfSet.at(find(c));
      plan.regionOf[c] = id;
      plan.regions[static_cast<size_t>(id)].members.push_back(c);
    }
  }
}

}  // namespace kiln::partition
