// The operator table: every tensor operator Kiln knows, defined once.
//
// An OpDef carries what both sides of Kiln need: the operator's name and operand
// count, its fusion pattern, the attributes it accepts, and its shape rule. The
// shape rule is the single definition of an operator's output types: the type
// checker calls it with `?` (kAnyDim) for dimensions unknown at compile time, and
// the VM will call the same function with concrete shapes at run time. Rules are
// pure functions; the table is built once, on first use, and is read-only after,
// so lookups are thread-safe.
#pragma once

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dtype.h"
#include "kernel_ir/attrs.h"

namespace kiln::ops {

// A dimension whose size is known only at run time (`?` in types).
inline constexpr int64_t kAnyDim = -1;
// The largest dimension, and the most elements a tensor type may have (2^40):
// far beyond any device, and small enough that shape arithmetic cannot overflow.
inline constexpr int64_t kMaxDimension = int64_t(1) << 40;
// Whether the static dimensions of `shape` fit those bounds.
bool shapeInBounds(std::span<const int64_t> shape);

using Shape = boost::container::small_vector<int64_t, 6>;

struct TensorDesc {
  DType dtype = DType::Float32;
  Shape shape;
  size_t rank() const { return shape.size(); }
  bool operator==(const TensorDesc& o) const { return dtype == o.dtype && shape == o.shape; }
};

// How an operator fuses with its neighbours (TVM's OpPatternKind, in the same order).
enum class OpPattern : uint8_t { ElemWise, Broadcast, Injective, CommReduce, OutEWiseFusable, Opaque };

struct OpDef;

// The operands of one call, as the shape rule sees them.
struct OpCall {
  const OpDef& op;
  std::span<const TensorDesc> inputs;  // for tuple-input operators: the tuple's fields
  AttrReader attrs;
};

using ShapeRule = std::vector<TensorDesc> (*)(const OpCall& call);

struct ComputeCall;  // ops/compute.h
// Lowers one output element to a loop-IR expression id (see ops/compute.h).
using ComputeRule = int32_t (*)(const ComputeCall& call);

struct OpDef {
  std::string name;
  // Number of tensor operands; for tuple-input operators, 1 (the tuple).
  int numInputs = 1;
  OpPattern pattern = OpPattern::Opaque;
  std::vector<std::string> attrNames;
  ShapeRule rule = nullptr;
  ComputeRule compute = nullptr;  // null: not lowerable by the generic path (yet)
  bool tupleInput = false;     // the single operand is a tuple of tensors (concatenate, stack)
  bool tupleOutput = false;    // the result is a tuple of the rule's outputs (split)
  bool dataDependent = false;  // output extents are known only after running (arange, argwhere, dyn.*)
  bool annotation = false;     // on_device / device_copy: any operand type, passed through

  // Checks attribute names; runs the rule. Throws OpError.
  std::vector<TensorDesc> infer(std::span<const TensorDesc> inputs, const AttrMap& attrs) const;
};

// Registration, used by the per-group files.
class OpTable {
 public:
  OpDef& add(std::string name, int numInputs, OpPattern pattern, ShapeRule rule,
             std::initializer_list<const char*> attrNames = {});
  std::vector<OpDef>& defs() { return defs_; }

 private:
  std::vector<OpDef> defs_;
};

}  // namespace kiln::ops
