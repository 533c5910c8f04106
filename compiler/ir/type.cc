// Type construction, equality, substitution and printing.
#include "compiler/ir/type.h"

#include <algorithm>
#include <vector>

#include "kernel_ir/shape_util.h"

namespace kiln::ir {

const TensorType* tensorType(Arena& a, DType dtype, std::span<const int64_t> shape) {
  auto* t = a.make<TensorType>();
  t->kind = TypeKind::Tensor;
  t->dtype = dtype;
  t->shape = a.copy(shape);
  return t;
}

const TensorType* scalarType(Arena& a, DType dtype) { return tensorType(a, dtype, {}); }

const TupleType* tupleType(Arena& a, std::span<const Type* const> fields) {
  auto* t = a.make<TupleType>();
  t->kind = TypeKind::Tuple;
  t->fields = a.copy(fields);
  return t;
}

const FuncType* funcType(Arena& a, std::span<const Type* const> params, const Type* result,
                         std::span<const TypeParam* const> typeParams) {
  auto* t = a.make<FuncType>();
  t->kind = TypeKind::Func;
  t->params = a.copy(params);
  t->result = result;
  t->typeParams = a.copy(typeParams);
  return t;
}

const AdtType* adtType(Arena& a, const TypeDef* def, std::span<const Type* const> args) {
  auto* t = a.make<AdtType>();
  t->kind = TypeKind::Adt;
  t->def = def;
  t->args = a.copy(args);
  return t;
}

const TypeDef* refTypeDef() {
  static const TypeDef* def = [] {
    static TypeParam content;
    content.kind = TypeKind::Param;
    content.name = "T";
    static const TypeParam* params[] = {&content};
    static TypeDef d;
    d.name = "ref";
    d.params = params;
    d.external = true;
    return &d;
  }();
  return def;
}

const AdtType* refType(Arena& a, const Type* content) {
  const Type* args[] = {content};
  return adtType(a, refTypeDef(), args);
}

namespace {
bool spanEqual(std::span<const Type* const> a, std::span<const Type* const> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!typeEqual(a[i], b[i])) return false;
  return true;
}
}  // namespace

bool typeEqual(const Type* a, const Type* b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind) return false;
  switch (a->kind) {
    case TypeKind::Tensor: {
      auto *x = static_cast<const TensorType*>(a), *y = static_cast<const TensorType*>(b);
      return x->dtype == y->dtype && std::equal(x->shape.begin(), x->shape.end(), y->shape.begin(), y->shape.end());
    }
    case TypeKind::Tuple:
      return spanEqual(static_cast<const TupleType*>(a)->fields, static_cast<const TupleType*>(b)->fields);
    case TypeKind::Func: {
      auto *x = static_cast<const FuncType*>(a), *y = static_cast<const FuncType*>(b);
      return x->typeParams.size() == y->typeParams.size() && spanEqual(x->params, y->params) &&
             typeEqual(x->result, y->result);
    }
    case TypeKind::Adt: {
      auto *x = static_cast<const AdtType*>(a), *y = static_cast<const AdtType*>(b);
      return x->def == y->def && spanEqual(x->args, y->args);
    }
    case TypeKind::Param: return false;
    case TypeKind::Meta: return static_cast<const MetaType*>(a)->id == static_cast<const MetaType*>(b)->id;
  }
  return false;
}

const Type* substitute(Arena& a, const Type* t, std::span<const TypeParam* const> params,
                       std::span<const Type* const> args) {
  if (params.empty()) return t;
  auto subAll = [&](std::span<const Type* const> in, bool& changed) {
    std::vector<const Type*> out(in.begin(), in.end());
    for (auto& x : out) {
      const Type* y = substitute(a, x, params, args);
      changed |= y != x;
      x = y;
    }
    return out;
  };
  switch (t->kind) {
    case TypeKind::Param:
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i] == t) return args[i];
      return t;
    case TypeKind::Tuple: {
      bool changed = false;
      auto f = subAll(static_cast<const TupleType*>(t)->fields, changed);
      return changed ? tupleType(a, f) : t;
    }
    case TypeKind::Func: {
      auto* ft = static_cast<const FuncType*>(t);
      bool changed = false;
      auto p = subAll(ft->params, changed);
      const Type* r = substitute(a, ft->result, params, args);
      return changed || r != ft->result ? funcType(a, p, r, ft->typeParams) : t;
    }
    case TypeKind::Adt: {
      auto* at = static_cast<const AdtType*>(t);
      bool changed = false;
      auto g = subAll(at->args, changed);
      return changed ? adtType(a, at->def, g) : t;
    }
    default: return t;
  }
}

std::string typeToString(const Type* t) {
  if (!t) return "?type";
  switch (t->kind) {
    case TypeKind::Tensor: return ops::descToString(toDesc(static_cast<const TensorType*>(t)));
    case TypeKind::Tuple: {
      auto* tt = static_cast<const TupleType*>(t);
      std::string out = "(";
      for (size_t i = 0; i < tt->fields.size(); ++i) out += (i ? ", " : "") + typeToString(tt->fields[i]);
      if (tt->fields.size() == 1) out += ",";
      return out + ")";
    }
    case TypeKind::Func: {
      auto* ft = static_cast<const FuncType*>(t);
      std::string out = "fn ";
      if (!ft->typeParams.empty()) {
        out += "[";
        for (size_t i = 0; i < ft->typeParams.size(); ++i)
          out += (i ? ", " : "") + std::string(ft->typeParams[i]->name);
        out += "]";
      }
      out += "(";
      for (size_t i = 0; i < ft->params.size(); ++i) out += (i ? ", " : "") + typeToString(ft->params[i]);
      return out + ") -> " + typeToString(ft->result);
    }
    case TypeKind::Adt: {
      auto* at = static_cast<const AdtType*>(t);
      if (at->def == refTypeDef()) return "ref(" + typeToString(at->args[0]) + ")";
      std::string out(at->def->name);
      if (!at->args.empty()) {
        out += "[";
        for (size_t i = 0; i < at->args.size(); ++i) out += (i ? ", " : "") + typeToString(at->args[i]);
        out += "]";
      }
      return out;
    }
    case TypeKind::Param: return std::string(static_cast<const TypeParam*>(t)->name);
    case TypeKind::Meta: return "_";
  }
  return "";
}

ops::TensorDesc toDesc(const TensorType* t) {
  ops::TensorDesc d;
  d.dtype = t->dtype;
  d.shape.assign(t->shape.begin(), t->shape.end());
  return d;
}

const TensorType* fromDesc(Arena& a, const ops::TensorDesc& d) {
  return tensorType(a, d.dtype, std::span<const int64_t>(d.shape.data(), d.shape.size()));
}

}  // namespace kiln::ir
