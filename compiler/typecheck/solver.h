// TypeSolver: the unknowns of type inference and their unification.
//
// An unknown (MetaType) is bound at most once to a type, except that its binding
// may *widen*: when it meets a type that differs only in dimension sizes, the
// differing dimensions become `?` (how a loop that grows a tensor, the two arms
// of an `if`, or a type parameter instantiated from several arguments get one
// type). Rigid types — those written in annotations — are checked, not widened:
// in Check mode, two different static sizes are a mismatch.
//
// An unknown already bound to a type that a Check contradicts (a pattern variable
// bound to Tensor[(1, 16)] returned where (1, 8) is declared) is not widened to
// `?` to make the check pass: its binding is kept and the check deferred
// (deferredChecks). The caller reports it once inference has converged: in that
// last pass no operator rule's result is stale, so the binding is a join of
// values that reach the checked place, and its static sizes are theirs. (Decided
// on the unknown's final type instead, it would pass: a `match` result joined to
// that unknown widens it with the other clauses' types, which flow out of the
// place, not into it.)
//
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

// A Check between `checked` (the other side) and a bound unknown whose binding,
// `found`, contradicted it in static sizes; `foundExpected`: the unknown was the
// expected side. `tag` is the caller's, to say where the check was made.
struct DeferredCheck {
  const Type* checked;
  const Type* found;
  bool foundExpected;
  uint32_t tag = 0;
};

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

  // Whether two types can be the same value's: equal but for dimensions that are
  // `?` on either side and unknowns still unbound. Binds nothing.
  bool compatible(const Type* a, const Type* b) const;
  std::vector<DeferredCheck>& deferredChecks() { return deferred_; }

  bool needsAnotherPass() const { return stale_; }
  Hints exportHints() const;

 private:
  const Type* bindingOf(uint32_t id) const { return bindings_[id]; }
  bool occurs(uint32_t id, const Type* t) const;
  // `metaExpected`: `m` is the expected side of the unification (for messages).
  const Type* unifyMeta(const MetaType* m, const Type* other, UnifyMode mode, bool metaExpected);
  void widen(uint32_t id, const Type* joined);
  [[noreturn]] void mismatch(const Type* a, const Type* b) const;

  Arena& a_;
  const Hints& hints_;
  std::vector<const Type*> bindings_;
  std::vector<bool> observed_;
  std::vector<MetaKey> keys_;
  std::unordered_map<MetaKey, const MetaType*, MetaKeyHash> byKey_;
  std::vector<DeferredCheck> deferred_;
  bool stale_ = false;
};

}  // namespace kiln::typecheck
