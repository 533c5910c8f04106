// Shared node-building steps of the partitioning passes.
#include "compiler/partition/rewrite_util.h"

namespace kiln::partition {

using namespace ir;

const Expr* substituteGroup(Builder& b, const Expr* x, const std::unordered_map<const Expr*, const Expr*>& params,
                            const std::unordered_map<const Var*, const Expr*>& absorbed) {
  auto p = params.find(x);
  if (p != params.end()) return p->second;
  auto again = [&](const Expr* y) { return substituteGroup(b, y, params, absorbed); };
  switch (x->kind) {
    case ExprKind::Var: {
      auto a = absorbed.find(static_cast<const Var*>(x));
      return a == absorbed.end() ? x : again(a->second);
    }
    case ExprKind::Call: {
      auto* c = static_cast<const Call*>(x);
      std::vector<const Expr*> args;
      for (const Expr* a : c->args) args.push_back(again(a));
      auto pc = params.find(c->callee);
      Call* n = b.call(pc == params.end() ? c->callee : pc->second, args, c->attrs, c->loc);
      n->type = c->type;
      return n;
    }
    case ExprKind::Tuple: {
      std::vector<const Expr*> fields;
      for (const Expr* f : static_cast<const Tuple*>(x)->fields) fields.push_back(again(f));
      Tuple* n = b.tuple(fields, x->loc);
      n->type = x->type;
      return n;
    }
    case ExprKind::TupleGet: {
      auto* g = static_cast<const TupleGet*>(x);
      TupleGet* n = b.tupleGet(again(g->tuple), g->index, g->loc);
      n->type = g->type;
      return n;
    }
    default: return x;
  }
}

Function* makeFunction(Builder& b, const std::vector<const Var*>& params, const Expr* body, const ops::AttrMap* attrs,
                       SourceLoc loc) {
  Function* fn = b.function({}, params, body->type, body, loc);
  fn->attrs = attrs;
  std::vector<const Type*> types;
  for (const Var* p : params) types.push_back(p->type);
  fn->type = funcType(b.arena(), types, body->type);
  return fn;
}

const Call* makeCall(Builder& b, const Expr* callee, const std::vector<const Expr*>& args, const Expr* like) {
  Call* c = b.call(callee, args, nullptr, like->loc);
  c->type = like->type;
  return c;
}

const Function* withBody(Builder b, const Function* fn, const Expr* body) {
  if (body == fn->body) return fn;
  Function* n = b.function(fn->typeParams, fn->params, fn->resultAnnotation, body, fn->loc);
  n->attrs = fn->attrs;
  n->primitive = fn->primitive;
  n->closure = fn->closure;
  n->type = fn->type;
  return n;
}

const Expr* rebuildLetChain(Builder& b, const Let* let, const std::function<bool(const Var*)>& skip,
                            const std::function<const Expr*(const Expr*)>& mutate) {
  std::vector<const Let*> kept;
  const Expr* x = let;
  while (x->kind == ExprKind::Let) {
    auto* l = static_cast<const Let*>(x);
    if (!skip(l->var)) kept.push_back(l);
    x = l->body;
  }
  // Values in evaluation order, so memoized rewrites see producers first.
  std::vector<const Expr*> values;
  for (const Let* l : kept) values.push_back(mutate(l->value));
  const Expr* body = mutate(x);
  for (size_t i = kept.size(); i-- > 0;) {
    const Let* l = kept[i];
    Let* n = b.let(l->var, values[i], body, l->graphStyle, l->loc);
    n->type = l->type;
    body = n;
  }
  return body;
}

std::unique_ptr<Module> rebuildModule(const Module& m,
                                      const std::function<const Function*(const GlobalFunction&, Module& out)>& f) {
  auto out = std::make_unique<Module>(m.arenaPtr(), m.file());
  for (const auto& t : m.typeDefs()) out->addTypeDef(t.def, t.fromPrelude);
  for (const GlobalFunction& g : m.functions()) {
    const Function* fn = f(g, *out);
    out->addFunction(g.var, fn, g.fromPrelude, g.lifted);
  }
  return out;
}

}  // namespace kiln::partition
