// partitionModule: the four partitioning passes, and composites inlined for Kiln.
#include "compiler/partition/partition.h"

#include <algorithm>
#include <unordered_map>

#include "compiler/ir/mutator.h"
#include "compiler/partition/builtin_patterns.h"
#include "compiler/partition/merge_composite.h"
#include "compiler/partition/partition_graph.h"
#include "compiler/partition/rewrite_util.h"
#include "compiler/passes/to_fused_function.h"
#include "kernel_ir/library_support.h"
#include "kiln/error.h"

namespace kiln::partition {

using namespace ir;

namespace {

std::string compilerOf(const Function* fn) {
  const ops::AttrValue* v = fn->attrs ? fn->attrs->find("Compiler") : nullptr;
  return v && v->kind == ops::AttrValue::Kind::String ? v->s : "";
}

// A region's body with its composites' bodies in their places (a library takes
// the operators; composites only told the partitioner what goes together).
const Expr* flatten(Builder& b, const Expr* e) {
  if (e->kind == ExprKind::Let) {
    auto* l = static_cast<const Let*>(e);
    Let* n = b.let(l->var, flatten(b, l->value), flatten(b, l->body), l->graphStyle, l->loc);
    n->type = l->type;
    return n;
  }
  if (e->kind != ExprKind::Call) return e;
  auto* c = static_cast<const Call*>(e);
  std::vector<const Expr*> args;
  for (const Expr* a : c->args) args.push_back(flatten(b, a));
  if (!compositeName(c).empty()) {
    auto* fn = static_cast<const Function*>(c->callee);
    std::unordered_map<const Expr*, const Expr*> params;
    for (size_t i = 0; i < fn->params.size(); ++i) params[fn->params[i]] = args[i];
    return substituteGroup(b, fn->body, params, {});
  }
  Call* n = b.call(c->callee, args, c->attrs, c->loc);
  n->type = c->type;
  return n;
}

// Composite calls inlined, and calls of offloaded regions replaced by their kernels.
//   `(fn (%p...) { body })(args)` -> `%p0 = arg0; ...; body` (graph bindings: the
//   fusion pass sees through them as through the call);
//   `@dnnl_main_0(args)` -> `(fn (%p..., Primitive=1, Compiler="dnnl") { ... })(args)`,
//   a kernel the fusion pass leaves whole and the library runs.
class CompositeInliner : public ExprMutator {
 public:
  CompositeInliner(Arena& a, const std::unordered_map<std::string_view, const Function*>& kernels)
      : ExprMutator(a), kernels_(kernels) {}

 protected:
  const Expr* visit(const Expr* e) override {
    if (e->kind == ExprKind::Call && static_cast<const Call*>(e)->callee->kind == ExprKind::GlobalVar) {
      auto* c = static_cast<const Call*>(e);
      auto k = kernels_.find(static_cast<const GlobalVar*>(c->callee)->name);
      if (k != kernels_.end()) {
        std::vector<const Expr*> args;
        for (const Expr* a : c->args) args.push_back(mutate(a));
        return typed(builder().call(k->second, args, nullptr, c->loc), c);
      }
    }
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

 private:
  const std::unordered_map<std::string_view, const Function*>& kernels_;
};

// The kernel a library runs for region @g, or null (with a note) when it does not take it.
const Function* libraryKernel(Builder& b, const GlobalFunction& g, const std::string& lib, std::vector<std::string>& notes) {
  Function* fn = makeFunction(b, std::vector<const Var*>(g.fn->params.begin(), g.fn->params.end()), flatten(b, g.fn->body),
                              g.fn->attrs, g.fn->loc);
  fn->primitive = true;
  std::string why;
  try {
    const kernel_ir::LibrarySupport* support = kernel_ir::findLibrary(lib);
    why = support ? support->unsupported(compiler::toFusedFunction(fn, std::string(g.var->name))) : "unknown library";
  } catch (const Error& e) {
    why = e.message();
  }
  if (why.empty()) return fn;
  notes.push_back("@" + std::string(g.var->name) + " runs on Kiln's kernels: " + why);
  return nullptr;
}

}  // namespace

std::unique_ptr<Module> lowerRegions(const Module& m, const std::function<bool(const std::string&)>& offloadable,
                                     std::vector<std::string>& notes) {
  Builder b(m.arena());
  std::unordered_map<std::string_view, const Function*> kernels;
  for (const GlobalFunction& g : m.functions()) {
    std::string lib = compilerOf(g.fn);
    if (lib.empty()) continue;
    if (!offloadable(lib)) {
      notes.push_back("@" + std::string(g.var->name) + " runs on Kiln's kernels: Kiln cannot call the library '" + lib + "' here");
    } else if (const Function* k = libraryKernel(b, g, lib, notes)) {
      kernels[g.var->name] = k;
    }
  }
  auto out = std::make_unique<Module>(m.arenaPtr(), m.file());
  for (const auto& t : m.typeDefs()) out->addTypeDef(t.def, t.fromPrelude);
  for (const GlobalFunction& g : m.functions()) {
    if (kernels.count(g.var->name)) continue;  // its one call site holds its kernel now
    if (g.fn->primitive) {
      out->addFunction(g.var, g.fn, g.fromPrelude, g.lifted);
      continue;
    }
    CompositeInliner in(m.arena(), kernels);
    out->addFunction(g.var, withBody(b, g.fn, in.mutate(g.fn->body)), g.fromPrelude, g.lifted);
  }
  return out;
}

PartitionStages partitionModule(const Module& typed, const PartitionOptions& options) {
  PartitionStages s;
  const std::vector<std::string>& libs = options.libraries;
  auto wanted = [&](const std::string& lib) { return std::find(libs.begin(), libs.end(), lib) != libs.end(); };
  // The user's patterns, and Kiln's own for each library they say nothing of.
  PatternTable table;
  table.append(options.patterns);
  std::vector<std::string> described = options.patterns.libraries();
  for (const std::string& lib : libs)
    if (std::find(described.begin(), described.end(), lib) == described.end())
      if (std::optional<PatternTable> builtin = builtinPatterns(lib)) table.append(*builtin);
  std::vector<CompositePattern> composites;
  for (const CompositePattern& c : table.composites)
    if (wanted(c.name.substr(0, c.name.find('.')))) composites.push_back(c);
  for (const std::string& lib : libs) {
    bool known = std::any_of(table.supports.begin(), table.supports.end(),
                             [&](const SupportRule& r) { return r.library == lib; }) ||
                 std::any_of(composites.begin(), composites.end(),
                             [&](const CompositePattern& c) { return c.name.compare(0, lib.size() + 1, lib + ".") == 0; });
    if (!known)
      throw Error("partition: no patterns name the library '" + lib +
                  "' (give a pattern file with `supports " + lib + " = ...` or `composite " + lib + ".name = ...`)");
  }
  s.composite = mergeComposite(typed, composites);
  s.plan = annotateTargets(*s.composite, table, libs);
  mergeCompilerRegions(*s.composite, s.plan);
  s.partitioned = partitionGraph(*s.composite, s.plan);
  s.notes = s.plan.notes;
  s.lowered = lowerRegions(*s.partitioned, options.offloadable, s.notes);
  return s;
}

}  // namespace kiln::partition
