// Dataflow facts of one function that partitioning relies on: which nodes a group
// (a composite or a library region) may take over without changing what the
// program computes or when its effects happen.
//
// Scopes: a function body is one scope; each `if` branch, `match` clause and
// function literal opens a new one. A group never spans scopes, so nothing moves
// into or out of a branch or a closure.
// Taking over a let: `let %v = call; ...` may move into a composite that uses %v
// when %v is used exactly once, in the same scope, and the bound call is used by
// nothing else (movable); into a region when every reference to %v is an
// argument of that region's calls (callUsers). Its binding is then dropped and
// the call evaluated where the group is; groups hold only calls that cannot have
// effects (operators and composites), so this changes no order that can be observed.
#pragma once

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/expr.h"

namespace kiln::partition {

class FunctionDataflow {
 public:
  explicit FunctionDataflow(const ir::Function* fn);

  // Every call of the function outside primitive functions, in evaluation order
  // (arguments before the call).
  const std::vector<const ir::Call*>& calls() const { return calls_; }
  int scopeOf(const ir::Expr* e) const;
  // Referenced from exactly one place (not shared, not bound and referenced again).
  bool singleParent(const ir::Expr* e) const;
  // The value of `v`'s let when a group in `scope` may take it over, else null.
  const ir::Expr* movable(const ir::Var* v, int scope) const;
  // The calls that use call `x`'s value, when `x` lies in `scope` and every use
  // is as an argument of a call — written in place, or through the variable of a
  // let in `scope` (then `*via`); each call once. Empty when some use is not.
  std::vector<const ir::Call*> callUsers(const ir::Call* x, int scope, const ir::Var** via) const;

 private:
  std::vector<const ir::Call*> calls_;
  std::unordered_map<const ir::Expr*, int> scope_;
  std::unordered_map<const ir::Expr*, int> parents_;
  std::unordered_map<const ir::Var*, int> varUses_;
  std::unordered_map<const ir::Var*, const ir::Let*> lets_;
  std::unordered_map<const ir::Expr*, const ir::Var*> boundBy_;                 // a let's value -> its variable
  std::unordered_map<const ir::Var*, std::vector<const ir::Call*>> varArgUsers_;  // references as call arguments
  std::unordered_map<const ir::Expr*, const ir::Call*> argUser_;                // written as an argument of this call
};

// Variables referenced in `fn` (its nested functions included) and bound
// nowhere in it: empty for every function a correct partition makes.
std::vector<const ir::Var*> freeVariables(const ir::Function* fn);

}  // namespace kiln::partition
