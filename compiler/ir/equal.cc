// Alpha-equivalence of IR. Let chains are compared with a loop.
#include "compiler/ir/equal.h"

#include <unordered_map>

namespace kiln::ir {

namespace {

class Equal {
 public:
  bool type(const Type* a, const Type* b) {
    if (a == b) return true;
    if (!a || !b || a->kind != b->kind) return false;
    switch (a->kind) {
      case TypeKind::Tensor: return typeEqual(a, b);
      case TypeKind::Tuple: return types(static_cast<const TupleType*>(a)->fields, static_cast<const TupleType*>(b)->fields);
      case TypeKind::Func: {
        auto *x = static_cast<const FuncType*>(a), *y = static_cast<const FuncType*>(b);
        if (x->typeParams.size() != y->typeParams.size()) return false;
        for (size_t i = 0; i < x->typeParams.size(); ++i) params_[x->typeParams[i]] = y->typeParams[i];
        return types(x->params, y->params) && type(x->result, y->result);
      }
      case TypeKind::Adt: {
        auto *x = static_cast<const AdtType*>(a), *y = static_cast<const AdtType*>(b);
        return x->def->name == y->def->name && types(x->args, y->args);
      }
      case TypeKind::Param: {
        auto it = params_.find(static_cast<const TypeParam*>(a));
        return it != params_.end() && it->second == b;
      }
      case TypeKind::Meta: return typeEqual(a, b);
    }
    return false;
  }

  bool types(std::span<const Type* const> a, std::span<const Type* const> b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!type(a[i], b[i])) return false;
    return true;
  }

  bool bindVar(const Var* a, const Var* b) {
    if (!type(a->annotation, b->annotation)) return false;
    vars_[a] = b;
    return true;
  }

  bool pattern(const Pattern* a, const Pattern* b) {
    if (a->kind != b->kind) return false;
    switch (a->kind) {
      case PatternKind::Wildcard: return true;
      case PatternKind::Var: return bindVar(static_cast<const PatternVar*>(a)->var, static_cast<const PatternVar*>(b)->var);
      case PatternKind::Ctor: {
        auto *x = static_cast<const PatternCtor*>(a), *y = static_cast<const PatternCtor*>(b);
        if (x->ctor->name != y->ctor->name || x->args.size() != y->args.size()) return false;
        for (size_t i = 0; i < x->args.size(); ++i)
          if (!pattern(x->args[i], y->args[i])) return false;
        return true;
      }
      case PatternKind::Tuple: {
        auto *x = static_cast<const PatternTuple*>(a), *y = static_cast<const PatternTuple*>(b);
        if (x->fields.size() != y->fields.size()) return false;
        for (size_t i = 0; i < x->fields.size(); ++i)
          if (!pattern(x->fields[i], y->fields[i])) return false;
        return true;
      }
    }
    return false;
  }

  bool exprs(std::span<const Expr* const> a, std::span<const Expr* const> b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!expr(a[i], b[i])) return false;
    return true;
  }

  bool expr(const Expr* a, const Expr* b) {
    while (a->kind == ExprKind::Let && b->kind == ExprKind::Let) {
      auto *x = static_cast<const Let*>(a), *y = static_cast<const Let*>(b);
      bool recursive = x->value->kind == ExprKind::Function;
      if (recursive && !bindVar(x->var, y->var)) return false;
      if (!expr(x->value, y->value)) return false;
      if (!recursive && !bindVar(x->var, y->var)) return false;
      a = x->body;
      b = y->body;
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
      case ExprKind::Var: {
        auto it = vars_.find(static_cast<const Var*>(a));
        return it != vars_.end() && it->second == b;
      }
      case ExprKind::GlobalVar: return static_cast<const GlobalVar*>(a)->name == static_cast<const GlobalVar*>(b)->name;
      case ExprKind::Constant: {
        auto *x = static_cast<const Constant*>(a), *y = static_cast<const Constant*>(b);
        return x->dtype == y->dtype && x->intValue == y->intValue &&
               (x->floatValue == y->floatValue || (x->floatValue != x->floatValue && y->floatValue != y->floatValue));
      }
      case ExprKind::Op: return static_cast<const OpRef*>(a)->op == static_cast<const OpRef*>(b)->op;
      case ExprKind::Ctor: return static_cast<const CtorRef*>(a)->ctor->name == static_cast<const CtorRef*>(b)->ctor->name;
      case ExprKind::Call: {
        auto *x = static_cast<const Call*>(a), *y = static_cast<const Call*>(b);
        static const ops::AttrMap kEmpty;
        const ops::AttrMap& ax = x->attrs ? *x->attrs : kEmpty;
        const ops::AttrMap& ay = y->attrs ? *y->attrs : kEmpty;
        return expr(x->callee, y->callee) && exprs(x->args, y->args) && ax == ay;
      }
      case ExprKind::Let: return false;
      case ExprKind::If: {
        auto *x = static_cast<const If*>(a), *y = static_cast<const If*>(b);
        return expr(x->cond, y->cond) && expr(x->thenBranch, y->thenBranch) && expr(x->elseBranch, y->elseBranch);
      }
      case ExprKind::Match: {
        auto *x = static_cast<const Match*>(a), *y = static_cast<const Match*>(b);
        if (x->complete != y->complete || x->clauses.size() != y->clauses.size() || !expr(x->scrutinee, y->scrutinee))
          return false;
        for (size_t i = 0; i < x->clauses.size(); ++i)
          if (!pattern(x->clauses[i].pattern, y->clauses[i].pattern) || !expr(x->clauses[i].body, y->clauses[i].body))
            return false;
        return true;
      }
      case ExprKind::Function: {
        auto *x = static_cast<const Function*>(a), *y = static_cast<const Function*>(b);
        if (x->typeParams.size() != y->typeParams.size() || x->params.size() != y->params.size()) return false;
        for (size_t i = 0; i < x->typeParams.size(); ++i) params_[x->typeParams[i]] = y->typeParams[i];
        for (size_t i = 0; i < x->params.size(); ++i)
          if (!bindVar(x->params[i], y->params[i])) return false;
        static const ops::AttrMap kNone;
        const ops::AttrMap& ax = x->attrs ? *x->attrs : kNone;
        const ops::AttrMap& ay = y->attrs ? *y->attrs : kNone;
        return x->primitive == y->primitive && ax == ay && type(x->resultAnnotation, y->resultAnnotation) && expr(x->body, y->body);
      }
      case ExprKind::Tuple: return exprs(static_cast<const Tuple*>(a)->fields, static_cast<const Tuple*>(b)->fields);
      case ExprKind::TupleGet: {
        auto *x = static_cast<const TupleGet*>(a), *y = static_cast<const TupleGet*>(b);
        return x->index == y->index && expr(x->tuple, y->tuple);
      }
      case ExprKind::RefOp: {
        auto *x = static_cast<const RefOp*>(a), *y = static_cast<const RefOp*>(b);
        return x->op == y->op && exprs(x->args, y->args);
      }
    }
    return false;
  }

 private:
  std::unordered_map<const Var*, const Var*> vars_;
  std::unordered_map<const TypeParam*, const TypeParam*> params_;
};

}  // namespace

bool structurallyEqual(const Expr* a, const Expr* b) { return Equal().expr(a, b); }

std::string moduleDifference(const Module& a, const Module& b, bool includePrelude) {
  auto typeDefs = [&](const Module& m) {
    std::vector<const TypeDef*> out;
    for (const auto& t : m.typeDefs())
      if (includePrelude || !t.fromPrelude) out.push_back(t.def);
    return out;
  };
  auto functions = [&](const Module& m) {
    std::vector<GlobalFunction> out;
    for (const auto& f : m.functions())
      if (includePrelude || !f.fromPrelude) out.push_back(f);
    return out;
  };
  auto ta = typeDefs(a), tb = typeDefs(b);
  if (ta.size() != tb.size()) return "different numbers of type definitions";
  for (size_t i = 0; i < ta.size(); ++i) {
    const TypeDef *x = ta[i], *y = tb[i];
    if (x->name != y->name || x->external != y->external || x->params.size() != y->params.size() ||
        x->ctors.size() != y->ctors.size())
      return "type " + std::string(x->name) + " differs";
    Equal withParams;
    std::vector<const Type*> px(x->params.begin(), x->params.end()), py(y->params.begin(), y->params.end());
    auto* fx = funcType(a.arena(), px, px.empty() ? nullptr : px[0], x->params);
    auto* fy = funcType(b.arena(), py, py.empty() ? nullptr : py[0], y->params);
    withParams.type(fx, fy);
    for (size_t c = 0; c < x->ctors.size(); ++c)
      if (x->ctors[c]->name != y->ctors[c]->name || !withParams.types(x->ctors[c]->fields, y->ctors[c]->fields))
        return "constructor " + std::string(x->ctors[c]->name) + " differs";
  }
  auto fa = functions(a), fb = functions(b);
  if (fa.size() != fb.size()) return "different numbers of functions";
  for (size_t i = 0; i < fa.size(); ++i) {
    if (fa[i].var->name != fb[i].var->name) return "function @" + std::string(fa[i].var->name) + " is missing";
    if (!Equal().expr(fa[i].fn, fb[i].fn)) return "function @" + std::string(fa[i].var->name) + " differs";
  }
  return "";
}

}  // namespace kiln::ir
