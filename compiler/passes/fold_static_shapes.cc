// foldStaticShapes: take(shape_of(x), literal) on a static dimension becomes the literal.
#include "compiler/passes/fold_static_shapes.h"

#include <algorithm>

#include "compiler/ir/mutator.h"
#include "compiler/ir/type.h"
#include "compiler/ir/visit.h"
#include "kernel_ir/attrs.h"
#include "kernel_ir/op.h"

namespace kiln::compiler {

using namespace ir;

namespace {

class ShapeFolder : public ExprMutator {
 public:
  using ExprMutator::ExprMutator;

 protected:
  const Expr* visit(const Expr* e) override {
    if (e->kind == ExprKind::Function && static_cast<const Function*>(e)->primitive) return e;
    const Expr* out = ExprMutator::visit(e);
    if (const Expr* folded = foldTake(out)) return folded;
    return out;
  }

 private:
  const Expr* foldTake(const Expr* e) {
    const Call* take = opCall(e, "take");
    if (!take || take->args.size() != 2) return nullptr;
    const Call* shapeOf = opCall(take->args[0], "shape_of");
    if (!shapeOf || shapeOf->args.size() != 1 || take->args[1]->kind != ExprKind::Constant) return nullptr;
    const TensorType* x = asTensor(shapeOf->args[0]->type);
    const TensorType* result = asTensor(take->type);
    if (!x || !result || !result->shape.empty() || !isInt(result->dtype)) return nullptr;
    ops::AttrMap none;
    ops::AttrReader attrs("take", take->attrs ? *take->attrs : none);
    // A 1-D shape vector: axis absent, 0 or -1 all index it.
    if (attrs.has("axis") && attrs.getInt("axis", 0) != 0 && attrs.getInt("axis", 0) != -1) return nullptr;
    auto rank = static_cast<int64_t>(x->shape.size());
    if (rank == 0) return nullptr;  // nothing to take (the type checker refuses it)
    int64_t i = static_cast<const Constant*>(take->args[1])->intValue;
    if (attrs.getString("mode", "clip") == "wrap") i = ((i % rank) + rank) % rank;
    else i = std::clamp<int64_t>(i, 0, rank - 1);
    int64_t dim = x->shape[static_cast<size_t>(i)];
    if (dim == kAnyDim) return nullptr;
    return typed(builder().intConst(result->dtype, dim, take->loc), take);
  }
};

}  // namespace

std::unique_ptr<Module> foldStaticShapes(const Module& m) {
  auto out = std::make_unique<Module>(m.arenaPtr(), m.file());
  for (const auto& t : m.typeDefs()) out->addTypeDef(t.def, t.fromPrelude);
  ShapeFolder folder(m.arena());
  for (const auto& g : m.functions())
    out->addFunction(g.var, static_cast<const Function*>(folder.mutate(g.fn)), g.fromPrelude);
  return out;
}

}  // namespace kiln::compiler
