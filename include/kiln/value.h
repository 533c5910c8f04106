// Values: what VM registers hold and what programs take and return.
//
// Representation: a Value is 16 bytes — an 8-byte payload, a kind and a dtype.
//   - Scalar: a 0-d host tensor held in the payload itself (int64 for integer and
//     bool dtypes, double for float dtypes). Loop counters, conditions and other
//     control-flow scalars live here, so a loop step allocates nothing.
//   - Object: a pointer to a reference-counted heap object: a Tensor, an ADT value
//     (constructor id and fields; tuples are ADT values with kTupleCtor), a closure
//     (function index and captured values), a reference cell (`ref(v)`: one
//     mutable value), or a storage block (raw memory that tensors are placed in).
//   - Empty: a register that holds nothing (never written, or released).
// Copying a Value adds a reference; the count is atomic, so values (and the
// constants of a shared Executable) may be copied and dropped on any thread.
//
// Views: a register may hold a borrowed object reference, a view, that adds no
// reference and drops none. The VM makes them where the bytecode guarantees
// that the object outlives the view (a field of a value its frame keeps to
// the end, an argument its caller holds across the call: bytecode/opcodes.def,
// get_field_view and `B` lists), so a recursion over a tree passes its
// weights and subtrees down without a locked instruction per call. A view
// never escapes as one: copying or moving it out makes an owned Value (one
// more reference), so whatever stores, returns or hands it to another thread
// owns what it holds; dropping a view does nothing. Only view() makes one.
// Objects are immutable once built, except storage, whose bytes kernels write, and
// reference cells, whose content `ref_write` replaces. A cell is not synchronized:
// a program reads and writes it on its VM's thread; an app that hands one cell to
// runs on several threads at once must order them itself. Counting does not
// collect cycles, and a cell can close one (a cell holding a value that holds the
// cell): such a structure outlives its last outside reference, as in TVM.
//
// Constructor ids index the constructor table of the executable that built the
// value (Executable::constructorName); keep the executable alive while reading them.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln {

inline constexpr uint32_t kTupleCtor = 0xFFFFFFFFu;

enum class ObjectKind : uint8_t { Tensor, Adt, Closure, Storage, Ref };

struct Object {
  std::atomic<uint32_t> refs{1};
  ObjectKind kind;
  explicit Object(ObjectKind k) : kind(k) {}
};

class Value;
struct RefObject;

struct TensorObject : Object {
  Tensor tensor;
  explicit TensorObject(Tensor t) : Object(ObjectKind::Tensor), tensor(std::move(t)) {}
};

// ADT values and tuples: fields are stored inline after the header.
struct AdtObject : Object {
  uint32_t ctor;
  uint32_t size;
  Value* fields();
  const Value* fields() const;
  AdtObject(uint32_t c, uint32_t n) : Object(ObjectKind::Adt), ctor(c), size(n) {}
};

struct ClosureObject : Object {
  uint32_t function;
  uint32_t size;  // captured values, stored inline after the header
  Value* captured();
  const Value* captured() const;
  ClosureObject(uint32_t f, uint32_t n) : Object(ObjectKind::Closure), function(f), size(n) {}
};

struct StorageObject : Object {
  std::shared_ptr<void> buffer;
  size_t bytes;
  Device device;
  StorageObject(std::shared_ptr<void> b, size_t n, Device d)
      : Object(ObjectKind::Storage), buffer(std::move(b)), bytes(n), device(d) {}
};

class Value {
 public:
  enum class Kind : uint8_t { Empty, Scalar, Object };

  Value() { bits_.i = 0; }
  // A copy is owned, a view's included.
  Value(const Value& o) : bits_(o.bits_), kind_(owned(o.kind_)), dtype_(o.dtype_) { retain(); }
  // Moved out of a view, the value takes a reference of its own.
  Value(Value&& o) noexcept : bits_(o.bits_), kind_(o.kind_), dtype_(o.dtype_) {
    if (kind_ == kView) [[unlikely]]
      own();
    o.kind_ = Kind::Empty;
  }
  Value& operator=(const Value& o) {
    if (this != &o) {
      o.retain();
      release();
      bits_ = o.bits_, kind_ = owned(o.kind_), dtype_ = o.dtype_;
    }
    return *this;
  }
  Value& operator=(Value&& o) noexcept {
    if (this != &o) {
      release();
      bits_ = o.bits_, kind_ = o.kind_, dtype_ = o.dtype_;
      if (kind_ == kView) [[unlikely]]
        own();
      o.kind_ = Kind::Empty;
    }
    return *this;
  }
  ~Value() { release(); }
  // Drops what the value holds (a reference, or nothing for a view or a
  // scalar), leaving it empty: a register cleared in place, without building an
  // empty Value and moving it in (an out-of-line assignment and a second release).
  [[gnu::always_inline]] void reset() { release(); }

  // This Value becomes a view of `o`'s object (a copy of `o` when it holds a
  // scalar or nothing): no reference is taken, and the caller guarantees that
  // the object outlives the view (see "Views" above).
  void view(const Value& o) {
    auto bits = o.bits_;
    Kind kind = o.kind_;
    DType dtype = o.dtype_;
    release();
    bits_ = bits, kind_ = kind == Kind::Object ? kView : kind, dtype_ = dtype;
  }
  bool isView() const { return kind_ == kView; }

  // A tensor (shares its buffer).
  Value(Tensor t);  // NOLINT: a tensor is a value
  // Inline, so that a scalar made and moved into a register is built there: made
  // out of line, its kind and dtype were two byte stores that the move read back
  // as one 16-bit load, which store forwarding cannot serve (a stall of the
  // VM's scalar instructions, 60% of a host-scalar kernel's time).
  static Value intScalar(DType dtype, int64_t v) {
    Value r = scalarOf(dtype);
    r.bits_.i = v;
    return r;
  }
  static Value floatScalar(DType dtype, double v) {
    Value r = scalarOf(dtype);
    r.bits_.f = v;
    return r;
  }
  static Value tuple(std::vector<Value> fields);
  static Value adt(uint32_t ctor, std::vector<Value> fields);
  // The same, moving each of `fields` into the value (they are left empty):
  // for callers that gather fields in a buffer of their own.
  static Value adtTaking(uint32_t ctor, std::span<Value> fields);
  static Value closure(uint32_t function, std::span<const Value> captured);
  static Value storage(std::shared_ptr<void> buffer, size_t bytes, Device device);
  static Value ref(Value content);

  Kind kind() const { return owned(kind_); }  // a view is an object
  bool empty() const { return kind_ == Kind::Empty; }
  bool isScalar() const { return kind_ == Kind::Scalar; }
  bool isObject(ObjectKind k) const { return holdsObject() && bits_.o->kind == k; }
  // A tensor of any rank, including a register scalar.
  bool isTensor() const { return isScalar() || isObject(ObjectKind::Tensor); }
  bool isAdt() const { return isObject(ObjectKind::Adt) && asAdt()->ctor != kTupleCtor; }
  bool isTuple() const { return isObject(ObjectKind::Adt) && asAdt()->ctor == kTupleCtor; }
  bool isClosure() const { return isObject(ObjectKind::Closure); }
  bool isRef() const { return isObject(ObjectKind::Ref); }

  // Register scalars.
  DType dtype() const { return dtype_; }
  int64_t intValue() const { return bits_.i; }
  double floatValue() const { return bits_.f; }
  // The scalar as a boolean condition (nonzero).
  bool truthy() const { return isFloat(dtype_) ? bits_.f != 0 : bits_.i != 0; }

  // The tensor (a register scalar becomes a fresh 0-d tensor). Throws if not a tensor.
  Tensor tensor() const;
  // Tuple and ADT fields; closures' captured values. Throws for other kinds.
  std::span<const Value> fields() const;
  uint32_t ctor() const;  // kTupleCtor for tuples

  Object* object() const { return holdsObject() ? bits_.o : nullptr; }
  const AdtObject* asAdt() const { return static_cast<const AdtObject*>(bits_.o); }
  const ClosureObject* asClosure() const { return static_cast<const ClosureObject*>(bits_.o); }
  const TensorObject* asTensorObject() const { return static_cast<const TensorObject*>(bits_.o); }
  const StorageObject* asStorage() const { return static_cast<const StorageObject*>(bits_.o); }
  // The cell itself (mutable through any copy of the value: every copy is the same cell).
  RefObject* asRef() const;

  // Structural description, for messages: "tensor 2x3xf32", "tuple of 2", "closure".
  std::string describe() const;

 private:
  // A view is stored as a kind of its own, kView, which no public Kind names:
  // release() counts down Kind::Object only, so dropping a view costs nothing
  // more than dropping a scalar, and no other byte says what a Value is.
  // Object and kView differ in bit 0 alone (holdsObject tests bit 1).
  static constexpr Kind kView = static_cast<Kind>(3);
  static_assert(static_cast<uint8_t>(Kind::Object) == 2, "holdsObject() tests bit 1");
  static constexpr Kind owned(Kind k) { return k == kView ? Kind::Object : k; }
  bool holdsObject() const { return (static_cast<uint8_t>(kind_) & 2) != 0; }
  // A view becomes an owned reference.
  void own() {
    kind_ = Kind::Object;
    retain();
  }

  explicit Value(Object* o) : kind_(Kind::Object) { bits_.o = o; }
  void retain() const {
    if (holdsObject()) bits_.o->refs.fetch_add(1, std::memory_order_relaxed);
  }
  void release() {
    if (kind_ == Kind::Object && bits_.o->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(bits_.o);
    kind_ = Kind::Empty;
  }
  static void destroy(Object* o);
  static Value scalarOf(DType dtype) {
    Value r;
    r.kind_ = Kind::Scalar;
    r.dtype_ = dtype;
    return r;
  }

  union {
    int64_t i;
    double f;
    Object* o;
  } bits_;
  Kind kind_ = Kind::Empty;  // or kView
  DType dtype_ = DType::Int32;
};

static_assert(sizeof(Value) == 16, "a register is 16 bytes");

struct RefObject : Object {
  Value content;
  explicit RefObject(Value v) : Object(ObjectKind::Ref), content(std::move(v)) {}
};
inline RefObject* Value::asRef() const { return static_cast<RefObject*>(bits_.o); }

inline Value* AdtObject::fields() { return reinterpret_cast<Value*>(this + 1); }
inline const Value* AdtObject::fields() const { return reinterpret_cast<const Value*>(this + 1); }
inline Value* ClosureObject::captured() { return reinterpret_cast<Value*>(this + 1); }
inline const Value* ClosureObject::captured() const { return reinterpret_cast<const Value*>(this + 1); }

}  // namespace kiln
