// Module: a whole program — type definitions and global functions — plus the
// arena that owns its nodes.
//
// A module holds a shared_ptr to its arena; a pass that builds a new module from
// an old one shares the arena (and every unchanged node). Definitions keep source
// order; lookups by name go through hash maps. Definitions that came from the
// prelude are marked so the printer can leave them implicit.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compiler/ir/expr.h"

namespace kiln::ir {

struct GlobalFunction {
  const GlobalVar* var;
  const Function* fn;
  bool fromPrelude = false;
  bool lifted = false;  // made by lambda lifting (a lambda or constructor wrapper), not written as a def
};

struct TypeDefEntry {
  const TypeDef* def;
  bool fromPrelude = false;
};

class Module {
 public:
  explicit Module(std::shared_ptr<Arena> arena, std::string file = "") : arena_(std::move(arena)), file_(std::move(file)) {}

  Arena& arena() const { return *arena_; }
  const std::shared_ptr<Arena>& arenaPtr() const { return arena_; }
  const std::string& file() const { return file_; }

  void addTypeDef(const TypeDef* def, bool fromPrelude = false);
  // Adds or replaces the function of that name.
  void addFunction(const GlobalVar* var, const Function* fn, bool fromPrelude = false, bool lifted = false);

  const std::vector<TypeDefEntry>& typeDefs() const { return typeDefs_; }
  const std::vector<GlobalFunction>& functions() const { return functions_; }

  const TypeDef* findTypeDef(std::string_view name) const;
  const Constructor* findConstructor(std::string_view name) const;
  const GlobalFunction* findFunction(std::string_view name) const;

 private:
  std::shared_ptr<Arena> arena_;
  std::string file_;
  std::vector<TypeDefEntry> typeDefs_;
  std::vector<GlobalFunction> functions_;
  std::unordered_map<std::string_view, size_t> typeIndex_;
  std::unordered_map<std::string_view, const Constructor*> ctorIndex_;
  std::unordered_map<std::string_view, size_t> functionIndex_;
};

}  // namespace kiln::ir
