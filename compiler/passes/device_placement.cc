// Device placement (see device_placement.h): constraints over every instance of
// every reachable global, specialization rounds, then the rewrite that makes
// copies and clones explicit.
#include "compiler/passes/device_placement.h"

#include "compiler/ir/visit.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "compiler/ir/arena.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/visit.h"
#include "compiler/passes/device_domains.h"
#include "compiler/passes/lambda_lift.h"
#include "kiln/error.h"
#include "kernel_ir/attrs.h"
#include "ops/registry.h"

namespace kiln::compiler {

using namespace kiln::ir;

namespace {

// Specialization rounds before the remaining references are unified outright.
constexpr int kMaxRounds = 12;

// Where an atom is used: its consumer and operand slot. Slot conventions: call
// operands 0..n-1 and the callee kCallee; a let's value 0 and the tail of the
// block after it 1; the tail of a function body, if arm or match clause
// kTail + arm.
struct Site {
  const Expr* owner;
  int slot;
  bool operator==(const Site& o) const { return owner == o.owner && slot == o.slot; }
};
struct SiteHash {
  size_t operator()(const Site& s) const { return std::hash<const void*>()(s.owner) * 31 + static_cast<size_t>(s.slot); }
};
constexpr int kCallee = -1;
constexpr int kTail = 1 << 20;

// Scalars, and tuples and ADT values made only of scalars (a list of loop
// counters, a tree of floats): host values.
bool isScalarType(const Type* t, int depth = 0) {
  if (depth > 16) return false;
  std::span<const Type* const> parts;
  if (auto* tt = asTensor(t)) return tt->rank() == 0;
  if (auto* tu = asTuple(t)) parts = tu->fields;
  else if (auto* a = asAdt(t)) parts = a->args;
  if (parts.empty()) return false;
  for (const Type* f : parts)
    if (!isScalarType(f, depth + 1)) return false;
  return true;
}

// Which types device_copy can copy: tensors, and tuples and ADT values built
// from them (no functions, no type variables that might be functions).
class Copyability {
 public:
  bool copyable(const Type* t) { return !mayHoldFunction(t, true, 0); }

 private:
  // `varsMayBe`: a type variable could be a function (at a use); inside an ADT's
  // constructor fields its own parameters are checked at the use instead.
  bool mayHoldFunction(const Type* t, bool varsMayBe, int depth) {
    if (!t || depth > 16) return true;
    switch (t->kind) {
      case TypeKind::Tensor: return false;
      case TypeKind::Param: return varsMayBe;
      case TypeKind::Tuple:
        for (const Type* f : static_cast<const TupleType*>(t)->fields)
          if (mayHoldFunction(f, varsMayBe, depth + 1)) return true;
        return false;
      case TypeKind::Adt: {
        auto* a = static_cast<const AdtType*>(t);
        if (a->def == refTypeDef()) return true;  // a copy of a cell would be another cell
        for (const Type* x : a->args)
          if (mayHoldFunction(x, varsMayBe, depth + 1)) return true;
        return !fieldsFunctionFree(a->def);
      }
      default: return true;  // functions (and anything unresolved)
    }
  }
  bool fieldsFunctionFree(const TypeDef* def) {
    auto it = memo_.find(def);
    if (it != memo_.end()) return it->second;
    memo_[def] = true;  // a recursive mention assumes the best; a function anywhere makes it false
    bool ok = true;
    for (const Constructor* c : def->ctors)
      for (const Type* f : c->fields) ok = ok && !mayHoldFunction(f, false, 0);
    memo_[def] = ok;
    return ok;
  }
  std::unordered_map<const TypeDef*, bool> memo_;
};

bool isClosureGlobal(const Function* fn) {
  return fn->body->kind == ExprKind::Function && static_cast<const Function*>(fn->body)->closure;
}

std::string deviceSuffix(Device d) {
  std::string s = d.toString();
  for (char& c : s)
    if (c == ':') c = '_';
  return s;
}

class Placer {
 public:
  Placer(const Module& m, std::vector<Device> devices) : m_(m), b_(m.arena()) {
    Device host{};
    if (devices.empty()) devices.push_back(host);
    devices_ = devices;
    if (std::find(devices_.begin(), devices_.end(), host) == devices_.end()) devices_.push_back(host);
    host_ = deviceIndex(host);
    for (Device d : devices_) hasGpu_ |= d.isGpu();
    default_ = deviceIndex(devices.front());
    for (size_t i = 0; i < m.functions().size(); ++i) {
      const GlobalFunction& g = m.functions()[i];
      globalIndex_[g.var->name] = i;
      originals_.push_back(static_cast<int>(instances_.size()));
      instances_.push_back(Instance{i, false, {}, std::string(g.var->name), g.var, {}});
    }
  }

  Placement run() {
    Placement out;
    for (int round = 1;; ++round) {
      out.rounds = round;
      build();
      solve();
      if (round >= kMaxRounds || !specialize()) break;
    }
    rewrite(out);
    return out;
  }

 private:
  struct Instance {
    size_t global;
    bool clone;
    // A clone for direct calls: the device of each parameter (captured values
    // first), -1 where not pinned (functions, type variables).
    std::vector<int> pin;
    std::string key;  // what it was cloned for, for messages
    const GlobalVar* var = nullptr;  // the original's; a clone's is made by the rewrite
    std::unordered_map<Site, int, SiteHash> targets;  // references retargeted to clones
  };
  // One use of an atom: its own domain, and its definition's (-1: none).
  struct Use {
    int use;
    int def;
    bool soft;
  };
  // A direct call of a global: where specialization looks for copies.
  struct DirectCall {
    int instance;
    const Call* call;
    int target;
  };
  struct Fix {
    int node;
    int device;
    int fallback;  // fixed instead when `node` is already on another device; -1: none
  };

  // ---- tables ----
  // Whether a fused kernel holds an operator that only runs natively on the host.
  bool runsOnHost(const Function* fn) {
    auto it = hostOnly_.find(fn);
    if (it != hostOnly_.end()) return it->second;
    bool found = false;
    std::vector<const Expr*> stack{fn->body};
    while (!stack.empty() && !found) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == ExprKind::Call) {
        const Expr* callee = static_cast<const Call*>(e)->callee;
        if (callee->kind == ExprKind::Op) found = static_cast<const OpRef*>(callee)->op->dataDependent;
      }
      forEachChild(e, [&](const Expr* c) { stack.push_back(c); });
    }
    hostOnly_.emplace(fn, found);
    return found;
  }

  int deviceIndex(Device d) {
    for (size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i] == d) return static_cast<int>(i);
    devices_.push_back(d);
    return static_cast<int>(devices_.size() - 1);
  }
  // The instance a reference to global `g` at `site` of instance `inst` means:
  // a clone it was retargeted to, else the global's original.
  int targetOf(int inst, Site site, const GlobalVar* g) const {
    const auto& targets = instances_[static_cast<size_t>(inst)].targets;
    auto t = targets.find(site);
    return t != targets.end() ? t->second : originals_[globalIndex_.at(g->name)];
  }
  const GlobalFunction& globalOf(int inst) const { return m_.functions()[instances_[static_cast<size_t>(inst)].global]; }
  const Function* fnOf(int inst) const { return globalOf(inst).fn; }

  [[noreturn]] void internal(const Expr* e, const std::string& what) const {
    throw Error(m_.file(), e->loc, "internal: device placement: " + what);
  }

  // ---- one round: constraints ----
  void build() {
    d_ = DeviceDomains();
    size_t n = instances_.size();
    dom_.assign(n, -1);
    nodes_.assign(n, {});
    uses_.assign(n, {});
    onDevice_.assign(n, {});
    calls_.clear();
    userFixes_.clear();
    hostFixes_.clear();
    entryFixes_.clear();
    work_.clear();
    for (size_t i = 0; i < m_.functions().size(); ++i)
      if (!m_.functions()[i].fromPrelude && !m_.functions()[i].lifted) domainOf(originals_[i]);
    while (!work_.empty()) {
      int inst = work_.back();
      work_.pop_back();
      analyze(inst);
    }
  }

  int ofType(const Type* t, int depth = 0) {
    if (auto* f = asFunc(t); f && depth < 16) {
      std::vector<int> ps;
      for (const Type* p : f->params) ps.push_back(ofType(p, depth + 1));
      int r = ofType(f->result, depth + 1);
      return d_.func(ps, r);
    }
    return d_.leaf(isScalarType(t));
  }

  // The function domain of an instance; the first request makes it reachable.
  int domainOf(int inst) {
    size_t i = static_cast<size_t>(inst);
    if (dom_[i] >= 0) return dom_[i];
    const Function* fn = fnOf(inst);
    int d;
    if (asFunc(fn->type)) {
      d = ofType(fn->type);
    } else {
      std::vector<int> ps;
      for (const Var* p : fn->params) ps.push_back(ofType(p->type));
      d = d_.func(ps, ofType(fn->body->type));
    }
    dom_[i] = d;
    work_.push_back(inst);
    return d;
  }

  // Binds a function's parameters to the children of domain F; returns the
  // result's domain.
  int bindParams(int inst, const Function* f, int F) {
    std::vector<int> ps(d_.params(F).begin(), d_.params(F).end());
    if (!d_.isFunc(F) || ps.size() != f->params.size()) {
      ps.clear();
      for (const Var* p : f->params) ps.push_back(ofType(p->type));
      int shaped = d_.func(ps, ofType(f->body->type));
      d_.unify(F, shaped);
      F = shaped;
    }
    for (size_t i = 0; i < ps.size(); ++i) nodes_[static_cast<size_t>(inst)][f->params[i]] = ps[i];
    return d_.result(F);
  }

  void analyze(int inst) {
    const Instance& in = instances_[static_cast<size_t>(inst)];
    const Function* fn = fnOf(inst);
    int G = dom_[static_cast<size_t>(inst)];
    int R = bindParams(inst, fn, G);
    const Function* bodyOwner = fn;
    std::vector<const Var*> params(fn->params.begin(), fn->params.end());
    if (isClosureGlobal(fn)) {
      bodyOwner = static_cast<const Function*>(fn->body);
      R = bindParams(inst, bodyOwner, R);
      params.insert(params.end(), bodyOwner->params.begin(), bodyOwner->params.end());
    }
    for (size_t i = 0; i < in.pin.size() && i < params.size(); ++i)
      if (in.pin[i] >= 0) entryFixes_.push_back({nodes_[static_cast<size_t>(inst)].at(params[i]), in.pin[i], -1});
    // `main`'s tensor parameters arrive on the default device.
    if (!in.clone && globalOf(inst).var->name == "main" && !globalOf(inst).fromPrelude)
      for (const Var* p : bodyOwner->params)
        if (!isScalarType(p->type) && !asFunc(p->type))
          entryFixes_.push_back({nodes_[static_cast<size_t>(inst)].at(p), default_, -1});
    d_.unify(block(inst, bodyOwner->body, Site{bodyOwner, kTail}), R);
  }

  int block(int inst, const Expr* e, Site tail) {
    auto& nodes = nodes_[static_cast<size_t>(inst)];
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      int v = value(inst, l->value, Site{l, 0});
      int def = ofType(l->var->type);
      d_.unify(def, v);
      nodes[l->var] = def;
      tail = Site{l, 1};
      e = l->body;
    }
    return value(inst, e, tail);
  }

  int atom(int inst, Site site, const Expr* e) {
    auto& uses = uses_[static_cast<size_t>(inst)];
    switch (e->kind) {
      case ExprKind::Var: {
        auto* v = static_cast<const Var*>(e);
        auto& nodes = nodes_[static_cast<size_t>(inst)];
        auto it = nodes.find(v);
        if (it == nodes.end()) internal(e, "unbound variable %" + std::string(v->name));
        int u = ofType(v->type);
        bool soft = copy_.copyable(v->type);
        if (soft) d_.soft(it->second, u);
        else d_.unify(it->second, u);
        uses[site] = Use{u, it->second, soft};
        return u;
      }
      case ExprKind::Constant: {
        // A literal is made on the host; a use elsewhere copies it.
        int def = d_.leaf(true), u = d_.leaf(true);
        hostFixes_.push_back(def);
        d_.soft(def, u);
        uses[site] = Use{u, def, true};
        return u;
      }
      case ExprKind::GlobalVar: {
        auto* g = static_cast<const GlobalVar*>(e);
        if (!globalIndex_.count(g->name)) internal(e, "unknown global @" + std::string(g->name));
        int target = targetOf(inst, site, g);
        // Every reference shares the instance's domain: a consistent solution
        // always exists; specialization (below) then removes the copies that
        // call sites on other devices needed.
        int T = domainOf(target);
        if (site.slot == kCallee) calls_.push_back(DirectCall{inst, static_cast<const Call*>(site.owner), target});
        uses[site] = Use{T, -1, false};
        return T;
      }
      case ExprKind::Ctor: return d_.leaf(isScalarType(e->type));
      default: internal(e, "expected an atom");
    }
  }

  // A call of a function domain F with argument domains.
  int apply(int F, const std::vector<int>& args) {
    std::vector<int> ps(d_.params(F).begin(), d_.params(F).end());
    if (d_.isFunc(F) && ps.size() == args.size()) {
      for (size_t i = 0; i < args.size(); ++i) d_.unify(ps[i], args[i]);
      return d_.result(F);
    }
    int L = d_.leaf(false);
    d_.unify(F, L);
    for (int a : args) d_.unify(a, L);
    return L;
  }

  int value(int inst, const Expr* e, Site site) {
    auto& nodes = nodes_[static_cast<size_t>(inst)];
    int r;
    switch (e->kind) {
      case ExprKind::Var:
      case ExprKind::GlobalVar:
      case ExprKind::Constant:
      case ExprKind::Ctor: return atom(inst, site, e);
      case ExprKind::Call: r = call(inst, static_cast<const Call*>(e)); break;
      case ExprKind::Tuple: {
        auto* t = static_cast<const Tuple*>(e);
        r = d_.leaf(isScalarType(e->type));
        for (size_t i = 0; i < t->fields.size(); ++i) d_.unify(atom(inst, Site{e, static_cast<int>(i)}, t->fields[i]), r);
        break;
      }
      case ExprKind::TupleGet: {
        int t = atom(inst, Site{e, 0}, static_cast<const TupleGet*>(e)->tuple);
        r = ofType(e->type);
        d_.unify(r, t);
        break;
      }
      case ExprKind::RefOp: {
        // A cell and its content share a domain, as a tuple and its fields do:
        // a cell is never copied, so whatever is written must already be there.
        auto* ref = static_cast<const RefOp*>(e);
        int cell = atom(inst, Site{e, 0}, ref->args[0]);
        if (ref->op == RefOpKind::Create) {
          r = d_.leaf(isScalarType(e->type));
          d_.unify(cell, r);
        } else if (ref->op == RefOpKind::Read) {
          r = ofType(e->type);
          d_.unify(r, cell);
        } else {
          d_.unify(cell, atom(inst, Site{e, 1}, ref->args[1]));
          r = ofType(e->type);
        }
        break;
      }
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        hostFixes_.push_back(atom(inst, Site{e, 0}, i->cond));  // conditions are read on the host
        r = ofType(e->type);
        d_.unify(r, block(inst, i->thenBranch, Site{e, kTail}));
        d_.unify(r, block(inst, i->elseBranch, Site{e, kTail + 1}));
        break;
      }
      case ExprKind::Match: {
        auto* m = static_cast<const Match*>(e);
        int s = atom(inst, Site{e, 0}, m->scrutinee);
        r = ofType(e->type);
        for (size_t k = 0; k < m->clauses.size(); ++k) {
          bindPattern(inst, m->clauses[k].pattern, s);
          d_.unify(r, block(inst, m->clauses[k].body, Site{e, kTail + static_cast<int>(k)}));
        }
        break;
      }
      case ExprKind::Let: return block(inst, e, site);
      default: internal(e, "unexpected expression");
    }
    nodes[e] = r;
    return r;
  }

  void bindPattern(int inst, const Pattern* p, int s) {
    switch (p->kind) {
      case PatternKind::Wildcard: return;
      case PatternKind::Var: {
        const Var* v = static_cast<const PatternVar*>(p)->var;
        int def = ofType(v->type);
        d_.unify(def, s);  // fields live on their value's device
        nodes_[static_cast<size_t>(inst)][v] = def;
        return;
      }
      case PatternKind::Ctor:
        for (const Pattern* a : static_cast<const PatternCtor*>(p)->args) bindPattern(inst, a, s);
        return;
      case PatternKind::Tuple:
        for (const Pattern* a : static_cast<const PatternTuple*>(p)->fields) bindPattern(inst, a, s);
        return;
    }
  }

  std::vector<int> args(int inst, const Call* c, size_t from = 0, size_t to = SIZE_MAX) {
    std::vector<int> out;
    for (size_t i = from; i < c->args.size() && i < to; ++i) out.push_back(atom(inst, Site{c, static_cast<int>(i)}, c->args[i]));
    return out;
  }

  int call(int inst, const Call* c) {
    const Expr* callee = c->callee;
    switch (callee->kind) {
      case ExprKind::Function: {
        // A kernel: operands and results on one device.
        int k = d_.leaf(isScalarType(c->type));
        for (int a : args(inst, c)) d_.unify(a, k);
        // Data-dependent operators run natively, in host memory: with a GPU in
        // play they stay on the host (quietly: their neighbours are not pulled).
        if (hasGpu_ && runsOnHost(static_cast<const Function*>(callee))) hostFixes_.push_back(k);
        return k;
      }
      case ExprKind::Op: {
        const ops::OpDef* op = static_cast<const OpRef*>(callee)->op;
        if (c->args.size() != 1 || (op->name != "on_device" && op->name != "device_copy")) break;
        ops::AttrMap none;
        ops::AttrReader attrs(op->name, c->attrs ? *c->attrs : none);
        int u = atom(inst, Site{c, 0}, c->args[0]);
        int r = ofType(c->type);
        if (op->name == "device_copy") {
          userFixes_.push_back({u, deviceIndex(ops::annotatedDevice(attrs, "src_device")), -1});
          userFixes_.push_back({r, deviceIndex(ops::annotatedDevice(attrs, "dst_device")), -1});
          return r;
        }
        int d = deviceIndex(ops::annotatedDevice(attrs, "device"));
        if (attrs.getBool("constrain_body", true)) {
          // The computation itself goes there: the definition of a variable
          // operand (unless something else fixed it first: then this use).
          const Use& use = uses_[static_cast<size_t>(inst)].at(Site{c, 0});
          if (use.def >= 0 && c->args[0]->kind == ExprKind::Var) userFixes_.push_back({use.def, d, u});
          else userFixes_.push_back({u, d, -1});
        }
        d_.soft(u, r);
        onDevice_[static_cast<size_t>(inst)][c] = {u, r};
        if (attrs.getBool("constrain_result", false)) userFixes_.push_back({r, d, -1});
        return r;
      }
      case ExprKind::GlobalVar: {
        int F = atom(inst, Site{c, kCallee}, callee);
        auto* g = static_cast<const GlobalVar*>(callee);
        const Function* fn = m_.functions()[globalIndex_.at(g->name)].fn;
        size_t cap = isClosureGlobal(fn) ? fn->params.size() : 0;
        if (cap && c->args.size() > cap) {
          int closure = apply(F, args(inst, c, 0, cap));
          return apply(closure, args(inst, c, cap));
        }
        return apply(F, args(inst, c));
      }
      case ExprKind::Var: {
        int F = atom(inst, Site{c, kCallee}, callee);
        return apply(F, args(inst, c));
      }
      case ExprKind::Ctor: {
        int r = d_.leaf(isScalarType(c->type));
        for (int a : args(inst, c)) d_.unify(a, r);
        return r;
      }
      default: break;
    }
    internal(c, "unexpected call");
  }

  // ---- one round: solving ----
  // Sources in order of authority: the program's own annotations, then where
  // entry arguments arrive and what specializations were pinned to. Host
  // requirements hold without pulling neighbours to the host.
  void solve() {
    for (const Fix& f : userFixes_)
      if (!d_.fix(f.node, f.device) && f.fallback >= 0) d_.fix(f.fallback, f.device);
    for (const Fix& f : entryFixes_)
      if (!d_.isFunc(f.node)) d_.fix(f.node, f.device);
    for (int n : hostFixes_) d_.fix(n, host_, false);
    d_.fixScalars(host_);
    d_.solve(default_);
  }

  // Where a direct call needed copies of its arguments because the callee's
  // parameters were placed elsewhere, the call is retargeted to a clone of the
  // callee whose parameters are pinned to where the caller has them; globals
  // passed as function arguments to that call get clones of their own for that
  // context (unified with the clone's parameters). False when nothing changed.
  bool specialize() {
    bool changed = false;
    for (const DirectCall& dc : calls_) {
      const auto& uses = uses_[static_cast<size_t>(dc.instance)];
      std::vector<int> pin;
      bool copies = false;
      for (size_t i = 0; i < dc.call->args.size(); ++i) {
        auto u = uses.find(Site{dc.call, static_cast<int>(i)});
        if (u == uses.end() || !u->second.soft) {
          pin.push_back(-1);
          continue;
        }
        int have = d_.device(u->second.def), want = d_.device(u->second.use);
        pin.push_back(have);
        copies |= have != want;
      }
      if (!copies) continue;
      size_t global = instances_[static_cast<size_t>(dc.target)].global;
      // Building a closure copies its captured values once; a clone would move
      // that copy into every call of the closure.
      const Function* calleeFn = m_.functions()[global].fn;
      if (isClosureGlobal(calleeFn) && dc.call->args.size() <= calleeFn->params.size()) continue;
      int clone = cloneFor(global, "call:" + pinKey(pin), pin);
      Site callee{dc.call, kCallee};
      {
        auto& targets = instances_[static_cast<size_t>(dc.instance)].targets;
        if (auto t = targets.find(callee); t != targets.end() && t->second == clone) continue;
        targets[callee] = clone;
      }
      changed = true;
      for (size_t i = 0; i < dc.call->args.size(); ++i) {
        auto* g = dc.call->args[i]->kind == ExprKind::GlobalVar ? static_cast<const GlobalVar*>(dc.call->args[i]) : nullptr;
        if (!g) continue;
        // cloneFor may grow instances_: look the caller up again afterwards.
        int valueClone = cloneFor(globalIndex_.at(g->name), "arg" + std::to_string(i) + " of " + std::to_string(clone), {});
        instances_[static_cast<size_t>(dc.instance)].targets[Site{dc.call, static_cast<int>(i)}] = valueClone;
      }
    }
    return changed;
  }

  std::string pinKey(const std::vector<int>& pin) const {
    std::string k;
    for (int p : pin) k += (k.empty() ? "" : ",") + (p < 0 ? std::string("_") : devices_[static_cast<size_t>(p)].toString());
    return k;
  }

  int cloneFor(size_t global, const std::string& key, std::vector<int> pin) {
    auto it = clones_.find({global, key});
    if (it != clones_.end()) return it->second;
    int clone = static_cast<int>(instances_.size());
    instances_.push_back(Instance{global, true, std::move(pin), key, nullptr, {}});
    clones_.emplace(std::make_pair(global, key), clone);
    return clone;
  }

  Device deviceAt(int index) const { return devices_[static_cast<size_t>(index)]; }
  Device deviceOfNode(int n) {
    if (d_.isFunc(n)) return deviceAt(host_);  // closures are host objects
    return deviceAt(d_.device(n));
  }
  // Where a binder or value expression of `inst` lives (the host if unconstrained).
  Device deviceOfExpr(int inst, const Expr* e) {
    const auto& nodes = nodes_[static_cast<size_t>(inst)];
    auto it = nodes.find(e);
    return it == nodes.end() ? deviceAt(host_) : deviceOfNode(it->second);
  }

  // ---- the rewrite ----
  using CopyScope = std::map<std::pair<const Var*, int>, const Var*>;
  struct Binding {
    const Var* var;
    const Expr* value;
    bool graphStyle;
    SourceLoc loc;
  };

  template <class T>
  T* typed(T* e, const Type* t) {
    e->type = t;
    return e;
  }

  Var* freshVar(int inst, const Var* old) {
    Var* v = typed(b_.var(old->name, old->annotation, old->loc), old->type);
    vars_[old] = v;
    plan_->of[v] = deviceOfExpr(inst, old);
    return v;
  }

  const Expr* copyCall(const Expr* x, Device src, Device dst, const Type* type, SourceLoc loc) {
    auto* attrs = b_.arena().own<ops::AttrMap>();
    attrs->set("src_device", ops::AttrValue::ofString(src.toString()));
    attrs->set("dst_device", ops::AttrValue::ofString(dst.toString()));
    const Expr* callee = b_.op(ops::findOp("device_copy"), loc);
    const Expr* arg[] = {x};
    auto* c = typed(b_.call(callee, arg, attrs, loc), type);
    plan_->of[c] = dst;
    return c;
  }

  // `let %<name>_<dst> = device_copy(x)` before the consumer; records the copy.
  const Var* bindCopy(int inst, const Expr* x, const std::string& name, const std::string& what, int src, int dst,
                      std::vector<Binding>& out) {
    Device s = deviceAt(src), t = deviceAt(dst);
    Var* cv = typed(b_.var(b_.arena().str(name + "_" + deviceSuffix(t)), nullptr, x->loc), x->type);
    plan_->of[cv] = t;
    out.push_back({cv, copyCall(x, s, t, x->type, x->loc), false, x->loc});
    copies_->push_back({names_[static_cast<size_t>(inst)], what, s, t});
    return cv;
  }

  const Expr* rwAtom(int inst, Site site, const Expr* e, std::vector<Binding>& out, CopyScope& scope) {
    const auto& uses = uses_[static_cast<size_t>(inst)];
    auto u = uses.find(site);
    switch (e->kind) {
      case ExprKind::Var: {
        auto* old = static_cast<const Var*>(e);
        const Var* v = vars_.at(old);
        if (u == uses.end() || !u->second.soft) return v;
        int src = d_.device(u->second.def), dst = d_.device(u->second.use);
        if (src == dst) return v;
        auto key = std::make_pair(old, dst);
        if (auto it = scope.find(key); it != scope.end()) return it->second;
        const Var* cv = bindCopy(inst, v, std::string(old->name), "%" + std::string(old->name), src, dst, out);
        scope[key] = cv;
        return cv;
      }
      case ExprKind::Constant: {
        if (u == uses.end()) return e;
        int src = d_.device(u->second.def), dst = d_.device(u->second.use);
        if (src == dst) return e;
        return bindCopy(inst, e, "literal", literalToString(static_cast<const Constant*>(e)), src, dst, out);
      }
      case ExprKind::GlobalVar: {
        int target = targetOf(inst, site, static_cast<const GlobalVar*>(e));
        return instances_[static_cast<size_t>(canonical_[static_cast<size_t>(target)])].var;
      }
      default: return e;
    }
  }

  std::vector<const Expr*> rwArgs(int inst, const Call* c, std::vector<Binding>& out, CopyScope& scope) {
    std::vector<const Expr*> as;
    for (size_t i = 0; i < c->args.size(); ++i) as.push_back(rwAtom(inst, Site{c, static_cast<int>(i)}, c->args[i], out, scope));
    return as;
  }

  const Expr* rwValue(int inst, const Expr* e, Site site, std::vector<Binding>& out, CopyScope& scope) {
    Expr* r = nullptr;
    switch (e->kind) {
      case ExprKind::Var:
      case ExprKind::GlobalVar:
      case ExprKind::Constant:
      case ExprKind::Ctor: return rwAtom(inst, site, e, out, scope);
      case ExprKind::Let: return rwBlock(inst, e, site, scope);
      case ExprKind::Call: {
        auto* c = static_cast<const Call*>(e);
        const Expr* callee = c->callee;
        if (callee->kind == ExprKind::Op && c->args.size() == 1) {
          const std::string& name = static_cast<const OpRef*>(callee)->op->name;
          if (name == "on_device") {
            // The annotation is spent: its operand, copied when the context wants it elsewhere.
            const Expr* a = rwAtom(inst, Site{c, 0}, c->args[0], out, scope);
            auto [u, res] = onDevice_[static_cast<size_t>(inst)].at(c);
            Device s = deviceAt(d_.device(u)), t = deviceAt(d_.device(res));
            if (s == t) return a;
            std::string what = a->kind == ExprKind::Var ? "%" + std::string(static_cast<const Var*>(a)->name) : "on_device";
            copies_->push_back({names_[static_cast<size_t>(inst)], what, s, t});
            return copyCall(a, s, t, c->type, c->loc);
          }
        }
        if (callee->kind == ExprKind::GlobalVar || callee->kind == ExprKind::Var)
          callee = rwAtom(inst, Site{c, kCallee}, callee, out, scope);
        auto as = rwArgs(inst, c, out, scope);
        r = b_.call(callee, as, c->attrs, c->loc);
        break;
      }
      case ExprKind::Tuple: {
        auto* t = static_cast<const Tuple*>(e);
        std::vector<const Expr*> fs;
        for (size_t i = 0; i < t->fields.size(); ++i) fs.push_back(rwAtom(inst, Site{e, static_cast<int>(i)}, t->fields[i], out, scope));
        r = b_.tuple(fs, e->loc);
        break;
      }
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        r = b_.tupleGet(rwAtom(inst, Site{e, 0}, g->tuple, out, scope), g->index, e->loc);
        break;
      }
      case ExprKind::RefOp: {
        auto* ref = static_cast<const RefOp*>(e);
        std::vector<const Expr*> as;
        for (size_t i = 0; i < ref->args.size(); ++i) as.push_back(rwAtom(inst, Site{e, static_cast<int>(i)}, ref->args[i], out, scope));
        r = b_.refOp(ref->op, as, e->loc);
        break;
      }
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        const Expr* c = rwAtom(inst, Site{e, 0}, i->cond, out, scope);
        const Expr* t = rwBlock(inst, i->thenBranch, Site{e, kTail}, scope);
        const Expr* f = rwBlock(inst, i->elseBranch, Site{e, kTail + 1}, scope);
        r = b_.ifElse(c, t, f, e->loc);
        break;
      }
      case ExprKind::Match: {
        auto* m = static_cast<const Match*>(e);
        const Expr* s = rwAtom(inst, Site{e, 0}, m->scrutinee, out, scope);
        std::vector<Clause> cs;
        for (size_t k = 0; k < m->clauses.size(); ++k) {
          const Pattern* p = rwPattern(inst, m->clauses[k].pattern);
          cs.push_back(Clause{p, rwBlock(inst, m->clauses[k].body, Site{e, kTail + static_cast<int>(k)}, scope)});
        }
        r = b_.match(s, cs, m->complete, e->loc);
        break;
      }
      default: internal(e, "unexpected expression in the rewrite");
    }
    r->type = e->type;
    plan_->of[r] = deviceOfExpr(inst, e);
    return r;
  }

  const Pattern* rwPattern(int inst, const Pattern* p) {
    switch (p->kind) {
      case PatternKind::Wildcard: return p;
      case PatternKind::Var: return b_.patternVar(freshVar(inst, static_cast<const PatternVar*>(p)->var), p->loc);
      case PatternKind::Ctor: {
        auto* c = static_cast<const PatternCtor*>(p);
        std::vector<const Pattern*> as;
        for (const Pattern* a : c->args) as.push_back(rwPattern(inst, a));
        return b_.patternCtor(c->ctor, as, p->loc);
      }
      case PatternKind::Tuple: {
        std::vector<const Pattern*> fs;
        for (const Pattern* a : static_cast<const PatternTuple*>(p)->fields) fs.push_back(rwPattern(inst, a));
        return b_.patternTuple(fs, p->loc);
      }
    }
    return p;
  }

  // A block: its own copies are visible to what follows in it, not to siblings.
  const Expr* rwBlock(int inst, const Expr* e, Site tail, const CopyScope& outer) {
    CopyScope scope = outer;
    std::vector<Binding> out;
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      const Expr* v = rwValue(inst, l->value, Site{l, 0}, out, scope);
      out.push_back({freshVar(inst, l->var), v, l->graphStyle, l->loc});
      tail = Site{l, 1};
      e = l->body;
    }
    const Expr* body = rwValue(inst, e, tail, out, scope);
    for (size_t i = out.size(); i-- > 0;) body = typed(b_.let(out[i].var, out[i].value, body, out[i].graphStyle, out[i].loc), body->type);
    return body;
  }

  const Function* rwFunction(int inst, const Function* f, bool outer) {
    if (outer) vars_.clear();
    std::vector<const Var*> ps;
    for (const Var* p : f->params) ps.push_back(freshVar(inst, p));
    const Expr* body;
    if (outer && isClosureGlobal(f)) body = rwFunction(inst, static_cast<const Function*>(f->body), false);
    else body = rwBlock(inst, f->body, Site{f, kTail}, {});
    Function* nf = typed(b_.function(f->typeParams, ps, f->resultAnnotation, body, f->loc), f->type);
    nf->primitive = f->primitive;
    nf->closure = f->closure;
    return nf;
  }

  void rewrite(Placement& out) {
    auto module = std::make_unique<Module>(m_.arenaPtr(), m_.file());
    for (const auto& td : m_.typeDefs()) module->addTypeDef(td.def, td.fromPrelude);
    plan_ = &out.plan;
    copies_ = &out.copies;
    out.plan.host = deviceAt(host_);
    out.plan.defaultDevice = deviceAt(default_);
    out.plan.devices = devices_;
    // Instances whose parameters and results ended up on the same devices are
    // one function: clones merge into the original or the first such clone.
    size_t n = instances_.size();
    canonical_.assign(n, -1);
    names_.assign(n, "");
    std::map<std::pair<size_t, std::string>, int> bySignature;
    std::vector<int> ls;
    for (size_t i = 0; i < n; ++i) {
      if (dom_[i] < 0) continue;  // unreachable
      ls.clear();
      d_.leaves(dom_[i], ls);
      std::string sig;
      for (int l : ls) sig += (sig.empty() ? "" : ".") + deviceAt(d_.device(l)).toString();
      Instance& in = instances_[i];
      auto [it, fresh] = bySignature.emplace(std::make_pair(in.global, sig), static_cast<int>(i));
      canonical_[i] = it->second;
      if (!fresh) continue;
      std::string name(m_.functions()[in.global].var->name);
      if (in.clone) {
        name += "@" + sig;
        in.var = b_.globalVar(b_.arena().str(name), m_.functions()[in.global].var->loc);
        out.specializations.push_back(name);
      }
      names_[i] = name;
    }
    std::vector<std::vector<int>> clonesOf(m_.functions().size());
    for (size_t i = 0; i < n; ++i)
      if (instances_[i].clone) clonesOf[instances_[i].global].push_back(static_cast<int>(i));
    for (size_t g = 0; g < m_.functions().size(); ++g) {
      std::vector<int> order{originals_[g]};
      order.insert(order.end(), clonesOf[g].begin(), clonesOf[g].end());
      for (int inst : order) {
        if (canonical_[static_cast<size_t>(inst)] != inst) continue;  // unreachable or merged
        const GlobalFunction& gf = m_.functions()[g];
        module->addFunction(instances_[static_cast<size_t>(inst)].var, rwFunction(inst, gf.fn, true),
                            gf.fromPrelude && inst == originals_[g], gf.lifted || inst != originals_[g]);
      }
    }
    out.module = std::move(module);
  }

  const Module& m_;
  Builder b_;
  std::vector<Device> devices_;
  bool hasGpu_ = false;
  std::unordered_map<const Function*, bool> hostOnly_;  // runsOnHost, per fused kernel
  int host_ = 0, default_ = 0;
  std::unordered_map<std::string_view, size_t> globalIndex_;
  std::vector<int> originals_;  // per global: its original instance
  std::vector<Instance> instances_;
  std::map<std::pair<size_t, std::string>, int> clones_;
  Copyability copy_;

  // The current round.
  DeviceDomains d_;
  std::vector<int> dom_;  // per instance; -1: not reached
  std::vector<std::unordered_map<const Expr*, int>> nodes_;  // per instance: binders and values
  std::vector<std::unordered_map<Site, Use, SiteHash>> uses_;
  std::vector<std::unordered_map<const Expr*, std::pair<int, int>>> onDevice_;  // operand use, result
  std::vector<DirectCall> calls_;
  std::vector<Fix> userFixes_, entryFixes_;
  std::vector<int> hostFixes_;
  std::vector<int> work_;

  // The rewrite.
  std::unordered_map<const Var*, const Var*> vars_;  // in the instance being rewritten
  std::vector<int> canonical_;  // per instance: the instance emitted for it (-1: unreachable)
  std::vector<std::string> names_;
  DevicePlan* plan_ = nullptr;
  std::vector<InsertedCopy>* copies_ = nullptr;
};

}  // namespace

Placement placeDevices(const Module& lifted, std::vector<Device> devices) {
  return Placer(lifted, std::move(devices)).run();
}

}  // namespace kiln::compiler
