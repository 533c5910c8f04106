// Unification with dimension widening, and zonking.
#include "compiler/typecheck/solver.h"

namespace kiln::typecheck {

const MetaType* TypeSolver::meta(MetaKey key) {
  auto it = byKey_.find(key);
  if (it != byKey_.end()) return it->second;
  auto* m = a_.make<MetaType>();
  m->kind = TypeKind::Meta;
  m->id = static_cast<uint32_t>(bindings_.size());
  auto h = hints_.find(key);
  bindings_.push_back(h == hints_.end() ? nullptr : h->second);
  observed_.push_back(false);
  keys_.push_back(key);
  byKey_.emplace(key, m);
  return m;
}

const Type* TypeSolver::resolve(const Type* t) const {
  while (t && t->kind == TypeKind::Meta) {
    const Type* b = bindingOf(static_cast<const MetaType*>(t)->id);
    if (!b) return t;
    t = b;
  }
  return t;
}

const Type* TypeSolver::zonk(const Type* t) const {
  t = resolve(t);
  if (!t) return t;
  auto all = [&](std::span<const Type* const> in, bool& changed) {
    std::vector<const Type*> out;
    out.reserve(in.size());
    for (const Type* x : in) {
      const Type* y = zonk(x);
      changed |= y != x;
      out.push_back(y);
    }
    return out;
  };
  switch (t->kind) {
    case TypeKind::Tuple: {
      bool changed = false;
      auto f = all(static_cast<const TupleType*>(t)->fields, changed);
      return changed ? tupleType(a_, f) : t;
    }
    case TypeKind::Func: {
      auto* ft = static_cast<const FuncType*>(t);
      bool changed = false;
      auto p = all(ft->params, changed);
      const Type* r = zonk(ft->result);
      return changed || r != ft->result ? funcType(a_, p, r, ft->typeParams) : t;
    }
    case TypeKind::Adt: {
      auto* at = static_cast<const AdtType*>(t);
      bool changed = false;
      auto g = all(at->args, changed);
      return changed ? adtType(a_, at->def, g) : t;
    }
    default: return t;
  }
}

bool TypeSolver::hasUnknowns(const Type* t) const {
  t = resolve(t);
  switch (t->kind) {
    case TypeKind::Meta: return true;
    case TypeKind::Tuple:
      for (const Type* f : static_cast<const TupleType*>(t)->fields)
        if (hasUnknowns(f)) return true;
      return false;
    case TypeKind::Func: {
      auto* ft = static_cast<const FuncType*>(t);
      for (const Type* p : ft->params)
        if (hasUnknowns(p)) return true;
      return hasUnknowns(ft->result);
    }
    case TypeKind::Adt:
      for (const Type* g : static_cast<const AdtType*>(t)->args)
        if (hasUnknowns(g)) return true;
      return false;
    default: return false;
  }
}

void TypeSolver::observe(const Type* t) {
  while (t && t->kind == TypeKind::Meta) {
    uint32_t id = static_cast<const MetaType*>(t)->id;
    observed_[id] = true;
    t = bindingOf(id);
  }
  if (!t) return;
  if (auto* tt = asTuple(t))
    for (const Type* f : tt->fields) observe(f);
}

bool TypeSolver::occurs(uint32_t id, const Type* t) const {
  t = resolve(t);
  switch (t->kind) {
    case TypeKind::Meta: return static_cast<const MetaType*>(t)->id == id;
    case TypeKind::Tuple:
      for (const Type* f : static_cast<const TupleType*>(t)->fields)
        if (occurs(id, f)) return true;
      return false;
    case TypeKind::Func: {
      auto* ft = static_cast<const FuncType*>(t);
      for (const Type* p : ft->params)
        if (occurs(id, p)) return true;
      return occurs(id, ft->result);
    }
    case TypeKind::Adt:
      for (const Type* g : static_cast<const AdtType*>(t)->args)
        if (occurs(id, g)) return true;
      return false;
    default: return false;
  }
}

void TypeSolver::mismatch(const Type* a, const Type* b) const {
  throw TypeMismatch{"expected " + typeToString(zonk(a)) + ", but found " + typeToString(zonk(b))};
}

void TypeSolver::widen(uint32_t id, const Type* joined) {
  const Type* old = bindingOf(id);
  if (old == joined) return;
  // Only a change in what the binding says matters (the join may be a fresh node).
  if (old && typeEqual(zonk(old), zonk(joined))) return;
  if (observed_[id]) stale_ = true;
  bindings_[id] = joined;
}

bool TypeSolver::compatible(const Type* a, const Type* b) const {
  a = resolve(a);
  b = resolve(b);
  if (a == b || a->kind == TypeKind::Meta || b->kind == TypeKind::Meta) return true;
  if (a->kind != b->kind) return false;
  auto allCompatible = [&](std::span<const Type* const> x, std::span<const Type* const> y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!compatible(x[i], y[i])) return false;
    return true;
  };
  switch (a->kind) {
    case TypeKind::Tensor: {
      auto *x = static_cast<const TensorType*>(a), *y = static_cast<const TensorType*>(b);
      if (x->dtype != y->dtype || x->rank() != y->rank()) return false;
      for (size_t i = 0; i < x->shape.size(); ++i)
        if (x->shape[i] != y->shape[i] && x->shape[i] != kAnyDim && y->shape[i] != kAnyDim) return false;
      return true;
    }
    case TypeKind::Tuple:
      return allCompatible(static_cast<const TupleType*>(a)->fields, static_cast<const TupleType*>(b)->fields);
    case TypeKind::Func: {
      auto *x = static_cast<const FuncType*>(a), *y = static_cast<const FuncType*>(b);
      return allCompatible(x->params, y->params) && compatible(x->result, y->result);
    }
    case TypeKind::Adt: {
      auto *x = static_cast<const AdtType*>(a), *y = static_cast<const AdtType*>(b);
      return x->def == y->def && allCompatible(x->args, y->args);
    }
    // Type parameters and the rest: left to unification, as before.
    default: return true;
  }
}

const Type* TypeSolver::unifyMeta(const MetaType* m, const Type* other, UnifyMode mode, bool metaExpected) {
  uint32_t id = m->id;
  const Type* b = bindingOf(id);
  if (!b) {
    if (occurs(id, other)) throw TypeMismatch{"a type would contain itself (" + typeToString(zonk(other)) + ")"};
    bindings_[id] = other;
    return m;
  }
  // A bound unknown widens to take in the other type; joining, types of another
  // dtype or rank are a mismatch here, in either mode.
  const Type* joined = unify(b, other, UnifyMode::Join);
  // Widening to pass a check would hide the mismatch (see solver.h).
  if (mode == UnifyMode::Check && !compatible(other, b)) {
    deferred_.push_back({other, zonk(b), metaExpected});
    return m;
  }
  widen(id, joined);
  return m;
}

const Type* TypeSolver::unify(const Type* a, const Type* b, UnifyMode mode) {
  // Follow chains of unknowns bound to unknowns.
  auto chase = [&](const Type* t) {
    while (t->kind == TypeKind::Meta) {
      const Type* n = bindingOf(static_cast<const MetaType*>(t)->id);
      if (!n || n->kind != TypeKind::Meta) break;
      t = n;
    }
    return t;
  };
  a = chase(a);
  b = chase(b);
  if (a == b) return a;
  if (a->kind == TypeKind::Meta) {
    auto* ma = static_cast<const MetaType*>(a);
    if (!bindingOf(ma->id)) return unifyMeta(ma, b, mode, true);
    if (b->kind == TypeKind::Meta && !bindingOf(static_cast<const MetaType*>(b)->id)) {
      bindings_[static_cast<const MetaType*>(b)->id] = a;
      return a;
    }
    if (b->kind == TypeKind::Meta) {
      auto* mb = static_cast<const MetaType*>(b);
      const Type* joined = unify(bindingOf(ma->id), bindingOf(mb->id), UnifyMode::Join);
      widen(ma->id, joined);
      if (observed_[mb->id]) observed_[ma->id] = true;
      bindings_[mb->id] = a;
      return a;
    }
    return unifyMeta(ma, b, mode, true);
  }
  if (b->kind == TypeKind::Meta) return unifyMeta(static_cast<const MetaType*>(b), a, mode, false);
  if (a->kind != b->kind) mismatch(a, b);

  switch (a->kind) {
    case TypeKind::Tensor: {
      auto *x = static_cast<const TensorType*>(a), *y = static_cast<const TensorType*>(b);
      if (x->dtype != y->dtype || x->rank() != y->rank()) mismatch(a, b);
      bool same = true;
      std::vector<int64_t> dims(x->shape.begin(), x->shape.end());
      for (size_t i = 0; i < dims.size(); ++i) {
        int64_t dx = x->shape[i], dy = y->shape[i];
        if (dx == dy) continue;
        if (mode == UnifyMode::Check && dx != kAnyDim && dy != kAnyDim) mismatch(a, b);
        dims[i] = kAnyDim;
        same &= dx == kAnyDim;
      }
      return same ? a : tensorType(a_, x->dtype, dims);
    }
    case TypeKind::Tuple: {
      auto *x = static_cast<const TupleType*>(a), *y = static_cast<const TupleType*>(b);
      if (x->fields.size() != y->fields.size()) mismatch(a, b);
      std::vector<const Type*> f;
      bool same = true;
      for (size_t i = 0; i < x->fields.size(); ++i) {
        f.push_back(unify(x->fields[i], y->fields[i], mode));
        same &= f.back() == x->fields[i];
      }
      return same ? a : tupleType(a_, f);
    }
    case TypeKind::Func: {
      auto *x = static_cast<const FuncType*>(a), *y = static_cast<const FuncType*>(b);
      if (x->params.size() != y->params.size() || !x->typeParams.empty() || !y->typeParams.empty()) mismatch(a, b);
      std::vector<const Type*> p;
      bool same = true;
      for (size_t i = 0; i < x->params.size(); ++i) {
        p.push_back(unify(x->params[i], y->params[i], mode));
        same &= p.back() == x->params[i];
      }
      const Type* r = unify(x->result, y->result, mode);
      return same && r == x->result ? a : funcType(a_, p, r);
    }
    case TypeKind::Adt: {
      auto *x = static_cast<const AdtType*>(a), *y = static_cast<const AdtType*>(b);
      if (x->def != y->def) mismatch(a, b);
      std::vector<const Type*> g;
      bool same = true;
      for (size_t i = 0; i < x->args.size(); ++i) {
        g.push_back(unify(x->args[i], y->args[i], mode));
        same &= g.back() == x->args[i];
      }
      return same ? a : adtType(a_, x->def, g);
    }
    case TypeKind::Param: mismatch(a, b);
    case TypeKind::Meta: break;
  }
  mismatch(a, b);
}

void TypeSolver::defaultUnbound(const Type* t) {
  for (auto& b : bindings_)
    if (!b) b = t;
}

Hints TypeSolver::exportHints() const {
  Hints out;
  for (size_t id = 0; id < bindings_.size(); ++id) {
    if (!bindings_[id]) continue;
    const Type* z = zonk(bindings_[id]);
    if (!hasUnknowns(z)) out[keys_[id]] = z;
  }
  return out;
}

}  // namespace kiln::typecheck
