// Operator definitions: building a table entry, and running a shape rule.
#include "kernel_ir/op.h"

#include "kernel_ir/shape_util.h"

#include <algorithm>

namespace kiln::ops {

OpDef& OpTable::add(std::string name, int numInputs, OpPattern pattern, ShapeRule rule,
                    std::initializer_list<const char*> attrNames) {
  OpDef& d = defs_.emplace_back();
  d.name = std::move(name);
  d.numInputs = numInputs;
  d.pattern = pattern;
  d.rule = rule;
  for (const char* a : attrNames) d.attrNames.emplace_back(a);
  return d;
}

std::vector<TensorDesc> OpDef::infer(std::span<const TensorDesc> inputs, const AttrMap& attrs) const {
  for (const auto& [name, value] : attrs.items()) {
    if (std::find(attrNames.begin(), attrNames.end(), name) == attrNames.end())
      throw OpError(this->name + ": unknown attribute '" + name + "'");
  }
  OpCall call{*this, inputs, AttrReader(this->name, attrs)};
  std::vector<TensorDesc> outs = rule(call);
  // Every result fits the bounds of a tensor type, so no size computed from it
  // (elements, bytes, offsets) can overflow: checked here once for the type
  // checker (static shapes) and for shape functions at run time (`?` shapes).
  for (const TensorDesc& o : outs)
    if (!shapeInBounds(std::span<const int64_t>(o.shape.data(), o.shape.size())))
      throw OpError(this->name + ": the result " + descToString(o) + " has more than 2^40 elements");
  return outs;
}

}  // namespace kiln::ops
