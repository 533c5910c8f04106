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
    std::unordered_map<const Call*, const Call*> consumer;  // member -> the member using it
    std::vector<const Call*> annotated;
    for (const Call* c : df.calls())
      if (plan.library.count(c)) annotated.push_back(c);
    for (const Call* c : annotated) {
      if (!movableCall(c)) continue;
      const std::string& lib = plan.library[c];
      int scope = df.scopeOf(c);
      for (const Expr* a : c->args) {
        const Expr* x = a;
        const Var* via = nullptr;
        if (a->kind == ExprKind::Var) {
          via = static_cast<const Var*>(a);
          x = df.movable(via, scope);
          if (!x) continue;
        }
        if (x->kind != ExprKind::Call) continue;
        auto* xc = static_cast<const Call*>(x);
        auto xl = plan.library.find(xc);
        if (xl == plan.library.end() || xl->second != lib || !movableCall(xc)) continue;
        if (!df.singleParent(xc) || df.scopeOf(xc) != scope || consumer.count(xc)) continue;
        consumer[xc] = c;
        if (via) plan.absorbed[via] = xc;
      }
    }
    // Regions in the order their roots are evaluated; members in evaluation order.
    std::unordered_map<const Call*, int> idOfRoot;
    for (const Call* c : annotated) {
      if (consumer.count(c)) continue;
      idOfRoot[c] = static_cast<int>(plan.regions.size());
      plan.regions.push_back(Region{plan.library[c], std::string(g.var->name), c, {}});
    }
    // A consumer is evaluated after what it consumes: walking backwards, its
    // region is known before its arguments' are.
    for (auto it = annotated.rbegin(); it != annotated.rend(); ++it) {
      auto cs = consumer.find(*it);
      plan.regionOf[*it] = cs == consumer.end() ? idOfRoot.at(*it) : plan.regionOf.at(cs->second);
    }
    for (const Call* c : annotated) plan.regions[static_cast<size_t>(plan.regionOf[c])].members.push_back(c);
  }
}

}  // namespace kiln::partition
