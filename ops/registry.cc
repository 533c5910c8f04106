// The operator table: built once from the per-group registration functions.
#include <unordered_map>

#include "ops/registry.h"

namespace kiln::ops {

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

}  // namespace kiln::ops
