// The operator table: built once from the per-group registration functions.
#include <algorithm>
#include <unordered_map>

#include "ops/op.h"

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

namespace {
struct Registry {
  std::vector<OpDef> defs;
  std::unordered_map<std::string_view, const OpDef*> byName;

  Registry() {
    OpTable table;
    registerElementwiseOps(table);
    registerReduceOps(table);
    registerLinalgOps(table);
    registerNNOps(table);
    registerTransformOps(table);
    registerCreateOps(table);
    defs = std::move(table.defs());
    for (const OpDef& d : defs) byName.emplace(d.name, &d);
  }
};

const Registry& registry() {
  static const Registry r;  // C++ guarantees thread-safe one-time construction
  return r;
}
}  // namespace

const OpDef* findOp(std::string_view name) {
  const auto& r = registry();
  auto it = r.byName.find(name);
  return it == r.byName.end() ? nullptr : it->second;
}

std::vector<const OpDef*> allOps() {
  std::vector<const OpDef*> out;
  for (const OpDef& d : registry().defs) out.push_back(&d);
  return out;
}

std::vector<TensorDesc> OpDef::infer(std::span<const TensorDesc> inputs, const AttrMap& attrs) const {
  for (const auto& [name, value] : attrs.items()) {
    if (std::find(attrNames.begin(), attrNames.end(), name) == attrNames.end())
      throw OpError(this->name + ": unknown attribute '" + name + "'");
  }
  OpCall call{*this, inputs, AttrReader(this->name, attrs)};
  return rule(call);
}

}  // namespace kiln::ops
