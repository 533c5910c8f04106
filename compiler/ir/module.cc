// Module bookkeeping: definitions and name lookup.
#include "compiler/ir/module.h"

namespace kiln::ir {

void Module::addTypeDef(const TypeDef* def, bool fromPrelude) {
  auto it = typeIndex_.find(def->name);
  if (it != typeIndex_.end()) {
    for (const Constructor* c : typeDefs_[it->second].def->ctors) ctorIndex_.erase(c->name);
    typeDefs_[it->second] = {def, fromPrelude};
  } else {
    typeIndex_.emplace(def->name, typeDefs_.size());
    typeDefs_.push_back({def, fromPrelude});
  }
  for (const Constructor* c : def->ctors) ctorIndex_[c->name] = c;
}

void Module::addFunction(const GlobalVar* var, const Function* fn, bool fromPrelude, bool lifted) {
  auto it = functionIndex_.find(var->name);
  if (it != functionIndex_.end()) {
    functions_[it->second] = {var, fn, fromPrelude, lifted};
    return;
  }
  functionIndex_.emplace(var->name, functions_.size());
  functions_.push_back({var, fn, fromPrelude, lifted});
}

const TypeDef* Module::findTypeDef(std::string_view name) const {
  auto it = typeIndex_.find(name);
  return it == typeIndex_.end() ? nullptr : typeDefs_[it->second].def;
}

const Constructor* Module::findConstructor(std::string_view name) const {
  auto it = ctorIndex_.find(name);
  return it == ctorIndex_.end() ? nullptr : it->second;
}

const GlobalFunction* Module::findFunction(std::string_view name) const {
  auto it = functionIndex_.find(name);
  return it == functionIndex_.end() ? nullptr : &functions_[it->second];
}

}  // namespace kiln::ir
