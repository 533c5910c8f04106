// Backward liveness over the A-normal form (see liveness.h).
#include "compiler/passes/liveness.h"

#include <algorithm>
#include <unordered_set>

#include "compiler/ir/visit.h"

namespace kiln::compiler {

using namespace kiln::ir;

namespace {

using VarSet = std::unordered_set<const Var*>;

const std::vector<const Var*> kNone;

// The operand variables of an A-normal-form value (call arguments and callee,
// tuple fields, the tuple of a projection, an alias), duplicates included.
template <class F>
void forEachOperandVar(const Expr* e, F&& f) {
  if (e->kind == ExprKind::Var) return f(static_cast<const Var*>(e));
  forEachChild(e, [&](const Expr* c) {
    if (c->kind == ExprKind::Var) f(static_cast<const Var*>(c));
  });
}

void patternVars(const Pattern* p, std::vector<const Var*>& out) {
  switch (p->kind) {
    case PatternKind::Wildcard: return;
    case PatternKind::Var: out.push_back(static_cast<const PatternVar*>(p)->var); return;
    case PatternKind::Ctor:
      for (const Pattern* a : static_cast<const PatternCtor*>(p)->args) patternVars(a, out);
      return;
    case PatternKind::Tuple:
      for (const Pattern* a : static_cast<const PatternTuple*>(p)->fields) patternVars(a, out);
      return;
  }
}

class Analysis {
 public:
  Liveness result;

  // On entry `live` is the set live after `e` (its block's continuation); on
  // exit, the set live before it.
  void block(const Expr* e, VarSet& live, LivenessPoint end) {
    std::vector<const Let*> lets;
    while (e->kind == ExprKind::Let) {
      lets.push_back(static_cast<const Let*>(e));
      e = static_cast<const Let*>(e)->body;
    }
    value(e, live, end);
    for (auto it = lets.rbegin(); it != lets.rend(); ++it) {
      const Let* l = *it;
      live.erase(l->var);
      value(l->value, live, letPoint(l));
    }
  }

 private:
  void value(const Expr* e, VarSet& live, LivenessPoint at) {
    switch (e->kind) {
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        VarSet thenLive = live, elseLive = live;
        block(i->thenBranch, thenLive, armPoint(i, 0));
        block(i->elseBranch, elseLive, armPoint(i, 1));
        VarSet in = thenLive;
        in.insert(elseLive.begin(), elseLive.end());
        deadOnEntry(armPoint(i, 0), in, thenLive);
        deadOnEntry(armPoint(i, 1), in, elseLive);
        live = std::move(in);
        uses(i->cond, live, testPoint(i));
        return;
      }
      case ExprKind::Match: {
        auto* m = static_cast<const Match*>(e);
        std::vector<VarSet> arms;
        VarSet in;
        for (size_t k = 0; k < m->clauses.size(); ++k) {
          VarSet armLive = live;
          block(m->clauses[k].body, armLive, armPoint(m, static_cast<int>(k)));
          std::vector<const Var*> bound;
          patternVars(m->clauses[k].pattern, bound);
          for (const Var* v : bound) armLive.erase(v);
          in.insert(armLive.begin(), armLive.end());
          arms.push_back(std::move(armLive));
        }
        // The scrutinee is read by every clause's tests, so it is live into each
        // arm's entry and dies there unless the arm uses it.
        const Var* s = m->scrutinee->kind == ExprKind::Var ? static_cast<const Var*>(m->scrutinee) : nullptr;
        if (s) in.insert(s);
        for (size_t k = 0; k < arms.size(); ++k) deadOnEntry(armPoint(m, static_cast<int>(k)), in, arms[k]);
        live = std::move(in);
        return;
      }
      default: uses(e, live, at);
    }
  }

  // Operands of a consumer: those not live after it die here.
  // Linear in the operands (a tuple may have hundreds of thousands): a variable
  // is dead here the first time it is met and is live from then on.
  void uses(const Expr* e, VarSet& live, LivenessPoint at) {
    std::vector<const Var*> dead;
    forEachOperandVar(e, [&](const Var* v) {
      if (live.insert(v).second) dead.push_back(v);
    });
    if (!dead.empty()) result.dying[at] = std::move(dead);
  }

  void deadOnEntry(LivenessPoint arm, const VarSet& in, const VarSet& armLive) {
    std::vector<const Var*> dead;
    for (const Var* v : in)
      if (!armLive.count(v)) dead.push_back(v);
    // Deterministic release order (the set's order is not).
    std::sort(dead.begin(), dead.end(), [](const Var* a, const Var* b) {
      if (a->loc.line != b->loc.line) return a->loc.line < b->loc.line;
      if (a->loc.col != b->loc.col) return a->loc.col < b->loc.col;
      return a->name < b->name;
    });
    if (!dead.empty()) result.deadOnEntry[arm] = std::move(dead);
  }
};

}  // namespace

const std::vector<const Var*>& Liveness::diesAt(LivenessPoint p) const {
  auto it = dying.find(p);
  return it == dying.end() ? kNone : it->second;
}

const std::vector<const Var*>& Liveness::deadOnEntryTo(LivenessPoint p) const {
  auto it = deadOnEntry.find(p);
  return it == deadOnEntry.end() ? kNone : it->second;
}

Liveness analyzeLiveness(const Expr* body) {
  Analysis a;
  VarSet live;
  a.block(body, live, functionEnd());
  a.result.liveIn.assign(live.begin(), live.end());
  std::sort(a.result.liveIn.begin(), a.result.liveIn.end());
  return std::move(a.result);
}

}  // namespace kiln::compiler
