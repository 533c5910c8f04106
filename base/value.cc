// Values and heap objects: construction, conversion to tensors, and destruction
// that never recurses (a list of a million cells is freed with a worklist).
#include "kiln/value.h"

#include <boost/container/small_vector.hpp>
#include <new>

#include "base/small_blocks.h"
#include "kiln/error.h"

namespace kiln {

static_assert(sizeof(AdtObject) % alignof(Value) == 0 && sizeof(ClosureObject) % alignof(Value) == 0,
              "inline fields follow the header, aligned");

// Tensor, tuple and closure objects come from the thread's small blocks
// (base/small_blocks.h): a VM makes and drops some at every step.
Value::Value(Tensor t) : kind_(Kind::Object) {
  void* p = small_blocks::allocate(sizeof(TensorObject));
  bits_.o = new (p) TensorObject(std::move(t));  // a move: cannot throw
}

template <class Obj>
static size_t bytesWithInline(size_t n) {
  return sizeof(Obj) + n * sizeof(Value);
}

template <class Obj>
static Obj* allocWithInline(uint32_t tagOrFn, size_t n) {
  void* p = small_blocks::allocate(bytesWithInline<Obj>(n));
  return new (p) Obj(tagOrFn, static_cast<uint32_t>(n));
}

Value Value::tuple(std::vector<Value> fields) { return adt(kTupleCtor, std::move(fields)); }

Value Value::adt(uint32_t ctor, std::vector<Value> fields) { return adtTaking(ctor, fields); }

Value Value::adtTaking(uint32_t ctor, std::span<Value> fields) {
  AdtObject* o = allocWithInline<AdtObject>(ctor, fields.size());
  for (size_t i = 0; i < fields.size(); ++i) new (&o->fields()[i]) Value(std::move(fields[i]));
  return Value(static_cast<Object*>(o));
}

Value Value::closure(uint32_t function, std::span<const Value> captured) {
  ClosureObject* o = allocWithInline<ClosureObject>(function, captured.size());
  for (size_t i = 0; i < captured.size(); ++i) new (&o->captured()[i]) Value(captured[i]);
  return Value(static_cast<Object*>(o));
}

Value Value::storage(std::shared_ptr<void> buffer, size_t bytes, Device device) {
  return Value(static_cast<Object*>(new StorageObject(std::move(buffer), bytes, device)));
}

Value Value::ref(Value content) { return Value(static_cast<Object*>(new RefObject(std::move(content)))); }

Tensor Value::tensor() const {
  if (kind_ == Kind::Scalar) {
    Tensor t = Tensor::empty(dtype_, std::span<const int64_t>{});
    writeScalar(t.data(), dtype_, bits_.i, bits_.f);
    return t;
  }
  if (isObject(ObjectKind::Tensor)) return asTensorObject()->tensor;
  throw Error("expected a tensor, got " + describe());
}

std::span<const Value> Value::fields() const {
  if (isObject(ObjectKind::Adt)) return {asAdt()->fields(), asAdt()->size};
  if (isObject(ObjectKind::Closure)) return {asClosure()->captured(), asClosure()->size};
  throw Error("expected a tuple or ADT value, got " + describe());
}

uint32_t Value::ctor() const {
  if (!isObject(ObjectKind::Adt)) throw Error("expected an ADT value, got " + describe());
  return asAdt()->ctor;
}

std::string Value::describe() const {
  switch (kind()) {
    case Kind::Empty: return "an empty register";
    case Kind::Scalar: return "scalar " + std::string(dtypeShortName(dtype_));
    case Kind::Object: break;
  }
  switch (bits_.o->kind) {
    case ObjectKind::Tensor: {
      const Tensor& t = asTensorObject()->tensor;
      std::string s = shapeString(t.shape());
      return "tensor " + (s.empty() ? "" : s + "x") + std::string(dtypeShortName(t.dtype()));
    }
    case ObjectKind::Adt:
      return asAdt()->ctor == kTupleCtor ? "a tuple of " + std::to_string(asAdt()->size) : "an ADT value";
    case ObjectKind::Closure: return "a closure";
    case ObjectKind::Storage: return "a storage block";
    case ObjectKind::Ref: return "a reference cell";
  }
  return "a value";
}

// Frees `first` and every object that dies with it, iteratively: fields whose last
// reference was held by a dying object join the worklist instead of recursing.
// The worklist lives on the stack until a structure is wider than it: a heap
// vector per death was a malloc and a free beside every kernel output that died
// in a loop, and every tuple a split made.
void Value::destroy(Object* first) {
  boost::container::small_vector<Object*, 32> work{first};
  auto dropInline = [&](Value* vs, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      Value& v = vs[i];
      if (v.kind_ == Kind::Object && v.bits_.o->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
        work.push_back(v.bits_.o);
      v.kind_ = Kind::Empty;
    }
  };
  while (!work.empty()) {
    Object* o = work.back();
    work.pop_back();
    switch (o->kind) {
      case ObjectKind::Tensor: {
        auto* t = static_cast<TensorObject*>(o);
        t->~TensorObject();
        small_blocks::release(t, sizeof(TensorObject));
        break;
      }
      case ObjectKind::Storage: delete static_cast<StorageObject*>(o); break;
      case ObjectKind::Adt: {
        auto* a = static_cast<AdtObject*>(o);
        dropInline(a->fields(), a->size);
        size_t bytes = bytesWithInline<AdtObject>(a->size);
        a->~AdtObject();
        small_blocks::release(a, bytes);
        break;
      }
      case ObjectKind::Closure: {
        auto* c = static_cast<ClosureObject*>(o);
        dropInline(c->captured(), c->size);
        size_t bytes = bytesWithInline<ClosureObject>(c->size);
        c->~ClosureObject();
        small_blocks::release(c, bytes);
        break;
      }
      case ObjectKind::Ref: {
        auto* r = static_cast<RefObject*>(o);
        dropInline(&r->content, 1);
        delete r;
        break;
      }
    }
  }
}

}  // namespace kiln
