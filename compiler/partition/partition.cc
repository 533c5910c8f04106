// partitionModule: the four partitioning passes, and composites inlined for Kiln.
#include "compiler/partition/partition.h"

#include <algorithm>

#include "compiler/ir/mutator.h"
#include "compiler/partition/merge_composite.h"
#include "compiler/partition/partition_graph.h"
#include "compiler/partition/rewrite_util.h"
#include "kiln/error.h"

namespace kiln::partition {

using namespace ir;

namespace {

std::string compilerOf(const Function* fn) {
  const ops::AttrValue* v = fn->attrs ? fn->attrs->find("Compiler") : nullptr;
  return v && v->kind == ops::AttrValue::Kind::String ? v->s : "";
}

// `(fn (%p...) { body })(args)` -> `%p0 = arg0; ...; body` (graph bindings: the
// fusion pass sees through them as through the call).
class CompositeInliner : public ExprMutator {
 public:
  explicit CompositeInliner(Arena& a) : ExprMutator(a) {}

 protected:
  const Expr* visit(const Expr* e) override {
    if (e->kind == ExprKind::Call && !compositeName(static_cast<const Call*>(e)).empty()) {
      auto* c = static_cast<const Call*>(e);
      auto* fn = static_cast<const Function*>(c->callee);
      std::vector<const Expr*> args;
      for (const Expr* a : c->args) args.push_back(mutate(a));
      const Expr* body = fn->body;
      for (size_t i = fn->params.size(); i-- > 0;) {
        Let* l = builder().let(fn->params[i], args[i], body, /*graphStyle=*/true, c->loc);
        l->type = c->type;
        body = l;
      }
      return body;
    }
    return ExprMutator::visit(e);
  }
};

}  // namespace

std::unique_ptr<Module> inlineComposites(const Module& m, const std::function<bool(const std::string&)>& keep) {
  return rebuildModule(m, [&](const GlobalFunction& g) -> const Function* {
    std::string lib = compilerOf(g.fn);
    if ((!lib.empty() && keep(lib)) || g.fn->primitive) return g.fn;
    CompositeInliner in(m.arena());
    return withBody(Builder(m.arena()), g.fn, in.mutate(g.fn->body));
  });
}

PartitionStages partitionModule(const Module& typed, const PartitionOptions& options) {
  PartitionStages s;
  const std::vector<std::string>& libs = options.libraries;
  auto wanted = [&](const std::string& lib) { return std::find(libs.begin(), libs.end(), lib) != libs.end(); };
  std::vector<CompositePattern> composites;
  for (const CompositePattern& c : options.patterns.composites)
    if (wanted(c.name.substr(0, c.name.find('.')))) composites.push_back(c);
  for (const std::string& lib : libs) {
    bool known = std::any_of(options.patterns.supports.begin(), options.patterns.supports.end(),
                             [&](const SupportRule& r) { return r.library == lib; }) ||
                 std::any_of(composites.begin(), composites.end(),
                             [&](const CompositePattern& c) { return c.name.compare(0, lib.size() + 1, lib + ".") == 0; });
    if (!known)
      throw Error("partition: no patterns name the library '" + lib +
                  "' (give a pattern file with `supports " + lib + " = ...` or `composite " + lib + ".name = ...`)");
  }
  s.composite = mergeComposite(typed, composites);
  s.plan = annotateTargets(*s.composite, options.patterns, libs);
  mergeCompilerRegions(*s.composite, s.plan);
  s.partitioned = partitionGraph(*s.composite, s.plan);
  s.notes = s.plan.notes;
  for (const GlobalFunction& g : s.partitioned->functions()) {
    std::string lib = compilerOf(g.fn);
    if (!lib.empty() && !options.offloadable(lib))
      s.notes.push_back("@" + std::string(g.var->name) + " runs on Kiln's kernels: Kiln cannot call the library '" + lib +
                        "' here");
  }
  s.lowered = inlineComposites(*s.partitioned, options.offloadable);
  return s;
}

}  // namespace kiln::partition
