// Liveness over the A-normal form of one lifted function: for every point where
// a value is consumed, which variables die there, so the emitter releases each
// value right after its last use and never before.
//
// The body is a tree (loops are tail calls), so one backward walk suffices. At a
// branch (if, match) each arm is walked from the live-out set of the whole
// construct; a variable live into the construct but not into an arm dies on
// entry to that arm, so a value used only by the `then` branch is released at the
// start of the `else` branch, and one used by both lives until the branch that
// runs uses it. Pattern variables are born at their arm's entry; the scrutinee
// lives through every clause's tests and dies on entry to an arm that does not
// use it. Arguments of a tail call all die at the call.
#pragma once

#include <unordered_map>
#include <vector>

#include "compiler/ir/expr.h"

namespace kiln::compiler {

// A point where values are consumed: a let (its value), the test of an if or
// match (`slot` -1), the final expression of a block (the function body: owner
// null; an if branch: slot 0 or 1; a match clause: its index), or the entry of
// an arm (the same keys as block ends, looked up in `deadOnEntry`).
struct LivenessPoint {
  const ir::Expr* owner;
  int slot;
  bool operator==(const LivenessPoint& o) const { return owner == o.owner && slot == o.slot; }
};

struct LivenessPointHash {
  size_t operator()(const LivenessPoint& p) const {
    return std::hash<const void*>()(p.owner) * 31 + static_cast<size_t>(p.slot + 1);
  }
};

struct Liveness {
  // Variables whose last use (on every path through this point) is here.
  std::unordered_map<LivenessPoint, std::vector<const ir::Var*>, LivenessPointHash> dying;
  // Variables live into a branch construct but dead in this arm: released on entry.
  std::unordered_map<LivenessPoint, std::vector<const ir::Var*>, LivenessPointHash> deadOnEntry;
  // Variables live on entry to the function body.
  std::vector<const ir::Var*> liveIn;

  const std::vector<const ir::Var*>& diesAt(LivenessPoint p) const;
  const std::vector<const ir::Var*>& deadOnEntryTo(LivenessPoint p) const;
};

Liveness analyzeLiveness(const ir::Expr* body);

// Keys, shared by the analysis and the emitter.
inline LivenessPoint letPoint(const ir::Let* l) { return {l, 0}; }
inline LivenessPoint testPoint(const ir::Expr* ifOrMatch) { return {ifOrMatch, -1}; }
inline LivenessPoint armPoint(const ir::Expr* ifOrMatch, int arm) { return {ifOrMatch, arm}; }
inline LivenessPoint functionEnd() { return {nullptr, 0}; }

}  // namespace kiln::compiler
