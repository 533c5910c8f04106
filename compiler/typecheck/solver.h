// TypeSolver: the unknowns of type inference and their unification.
//
// An unknown (MetaType) is bound at most once to a type, except that its binding
// may *widen*: when it meets a type that differs only in dimension sizes, the
// differing dimensions become `?` (how a loop that grows a tensor, the two arms
// of an `if`, or a type parameter instantiated from several arguments get one
// type). Rigid types — those written in annotations — are checked, not widened:
// in Check mode, two different static sizes are a mismatch.
//
// A widening after an operator rule already read the unknown makes the rule's
// result stale; the solver notes it (needsAnotherPass) and the caller runs type
// inference again, seeding each unknown with the final type of the last pass
// (hints, keyed by the syntax that created the unknown). Dimensions only ever
// widen, so this terminates.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/ir/type.h"

namespace kiln::typecheck {

using namespace kiln::ir;

struct TypeMismatch {
  std::string what;
};

enum class UnifyMode { Join, Check };

// Identifies the syntax that created an unknown: a node and a slot within it.
struct MetaKey {
  const void* site;
  uint32_t slot;
  bool operator==(const MetaKey& o) const { return site == o.site && slot == o.slot; }
};
struct MetaKeyHash {
  size_t operator()(const MetaKey& k) const { return std::hash<const void*>()(k.site) * 31 + k.slot; }
};
using Hints = std::unordered_map<MetaKey, const Type*, MetaKeyHash>;

class TypeSolver {
 public:
  TypeSolver(Arena& arena, const Hints& hints) : a_(arena), hints_(hints) {}

  // The unknown for `key`; the same key gives the same unknown within a pass.
  const MetaType* meta(MetaKey key);

  // Follows bound unknowns to the outermost non-unknown type (or an unbound one).
  const Type* resolve(const Type* t) const;
  // Substitutes every bound unknown, deeply.
  const Type* zonk(const Type* t) const;
  bool hasUnknowns(const Type* t) const;
  // Marks the unknowns that `t` goes through as read by a rule.
  void observe(const Type* t);

  // Unifies; returns the joined type. Throws TypeMismatch.
  const Type* unify(const Type* expected, const Type* actual, UnifyMode mode);

  // Binds every still-unbound unknown to `t` (used to close off unconstrained ones).
  void defaultUnbound(const Type* t);

  bool needsAnotherPass() const { return stale_; }
  Hints exportHints() const;

 private:
  const Type* bindingOf(uint32_t id) const { return bindings_[id]; }
  bool occurs(uint32_t id, const Type* t) const;
  const Type* unifyMeta(const MetaType* m, const Type* other);
  void widen(uint32_t id, const Type* joined);
  [[noreturn]] void mismatch(const Type* a, const Type* b) const;

  Arena& a_;
  const Hints& hints_;
  std::vector<const Type*> bindings_;
  std::vector<bool> observed_;
  std::vector<MetaKey> keys_;
  std::unordered_map<MetaKey, const MetaType*, MetaKeyHash> byKey_;
  bool stale_ = false;
};

}  // namespace kiln::typecheck
