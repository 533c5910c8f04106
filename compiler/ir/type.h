// Types of the IR: tensors with static and `?` dimensions, tuples, functions,
// algebraic data types, type parameters, and the type checker's unknowns.
//
// Representation: every type is an immutable, arena-allocated node whose first
// member is its kind; child types are spans of pointers into the same arena.
// Types are compared structurally (typeEqual), never by pointer, except type
// parameters, which are compared by identity: each `[A]` binder is one TypeParam
// node and every mention of it points there. A scalar is a rank-0 tensor
// (`float32` means `Tensor[(), float32]`). `?` is stored as kAnyDim (-1).
//
// MetaType nodes (inference unknowns) exist only while the type checker runs; no
// type stored in a checked module contains one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "compiler/ir/arena.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kernel_ir/op.h"

namespace kiln::ir {

using ops::kAnyDim;

enum class TypeKind : uint8_t { Tensor, Tuple, Func, Adt, Param, Meta };

struct Type {
  TypeKind kind;
};

struct TensorType : Type {
  DType dtype;
  std::span<const int64_t> shape;
  size_t rank() const { return shape.size(); }
};

struct TupleType : Type {
  std::span<const Type* const> fields;
};

struct TypeParam : Type {
  std::string_view name;
};

struct FuncType : Type {
  std::span<const TypeParam* const> typeParams;  // non-empty: polymorphic
  std::span<const Type* const> params;
  const Type* result;
};

struct TypeDef;

struct AdtType : Type {
  const TypeDef* def;
  std::span<const Type* const> args;
};

struct MetaType : Type {
  uint32_t id;
};

struct Constructor {
  std::string_view name;
  const TypeDef* owner;
  std::span<const Type* const> fields;  // may mention owner->params
  uint32_t tag;                          // index within owner->ctors
  SourceLoc loc;
};

struct TypeDef {
  std::string_view name;
  std::span<const TypeParam* const> params;
  std::span<const Constructor* const> ctors;  // empty exactly when external
  SourceLoc loc;
  // `extern type T`: opaque, no constructors; its values come from outside the
  // program (TVM's `core.rly` declares the VM's `Storage` this way).
  bool external = false;
};

// Construction helpers (all allocate in `a`).
const TensorType* tensorType(Arena& a, DType dtype, std::span<const int64_t> shape);
const TensorType* scalarType(Arena& a, DType dtype);
const TupleType* tupleType(Arena& a, std::span<const Type* const> fields);
const FuncType* funcType(Arena& a, std::span<const Type* const> params, const Type* result,
                         std::span<const TypeParam* const> typeParams = {});
const AdtType* adtType(Arena& a, const TypeDef* def, std::span<const Type* const> args);

// The type of reference cells, `ref(T)` in the text: a built-in external type of
// one parameter (one definition per process, in no module), so unification,
// substitution and equality treat it as any other type application. Only the ref
// operations make or read its values.
const TypeDef* refTypeDef();
inline bool isRefType(const Type* t) {
  return t && t->kind == TypeKind::Adt && static_cast<const AdtType*>(t)->def == refTypeDef();
}
const AdtType* refType(Arena& a, const Type* content);

inline const TensorType* asTensor(const Type* t) {
  return t && t->kind == TypeKind::Tensor ? static_cast<const TensorType*>(t) : nullptr;
}
inline const TupleType* asTuple(const Type* t) {
  return t && t->kind == TypeKind::Tuple ? static_cast<const TupleType*>(t) : nullptr;
}
inline const FuncType* asFunc(const Type* t) {
  return t && t->kind == TypeKind::Func ? static_cast<const FuncType*>(t) : nullptr;
}
inline const AdtType* asAdt(const Type* t) {
  return t && t->kind == TypeKind::Adt ? static_cast<const AdtType*>(t) : nullptr;
}

// Structural equality; type parameters by identity (or through `paramMap` pairs
// when comparing two modules).
bool typeEqual(const Type* a, const Type* b);

// Replaces type parameters by the types given for them.
const Type* substitute(Arena& a, const Type* t, std::span<const TypeParam* const> params,
                       std::span<const Type* const> args);

// Relay text of a type: `Tensor[(2, ?), float32]`, `float32`, `(A, List[A])`.
std::string typeToString(const Type* t);

ops::TensorDesc toDesc(const TensorType* t);
const TensorType* fromDesc(Arena& a, const ops::TensorDesc& d);

}  // namespace kiln::ir
