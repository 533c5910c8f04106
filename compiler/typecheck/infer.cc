// Type inference: one pass over every function body, repeated while a widened
// unknown invalidates a rule's earlier result (see solver.h).
#include "compiler/typecheck/infer.h"

#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/typecheck/exhaustive.h"
#include "compiler/typecheck/solver.h"
#include "kernel_ir/shape_util.h"

namespace kiln::typecheck {

namespace {

constexpr int kMaxPasses = 64;

class Inferer {
 public:
  Inferer(Module& m, const Hints& hints) : m_(m), a_(m.arena()), s_(m.arena(), hints) {}

  void run() {
    for (const GlobalFunction& g : m_.functions()) globalTypes_[g.var] = signature(g.fn);
    for (const GlobalFunction& g : m_.functions()) {
      current_ = &g;
      checkFunction(g.fn);
      flushPending(false);
    }
    current_ = nullptr;
    flushPending(true);
  }

  bool needsAnotherPass() const { return s_.needsAnotherPass(); }
  Hints hints() const { return s_.exportHints(); }

  // Closes the module: reports what could not be inferred, checks `match`
  // exhaustiveness, and writes the checked types into the nodes.
  void finish() {
    for (const auto& [v, fn, gname] : globalParams_) {
      if (s_.hasUnknowns(v->type))
        fail(v->loc, "cannot infer the type of parameter %" + std::string(v->name) + " of @" + std::string(gname) +
                         "; add a type annotation");
    }
    failDeferredChecks();
    for (const auto& [cond, t] : conditions_) checkCondition(cond, t);
    s_.defaultUnbound(tupleType(a_, {}));
    for (const Match* mt : matches_) {
      if (!mt->complete) continue;
      const Type* st = s_.zonk(scrutineeTypes_.at(mt));
      if (auto missing = findUnmatched(mt->clauses, st, a_))
        fail(mt->loc, "match is not exhaustive: no clause matches " + *missing);
    }
    for (auto& [e, t] : exprTypes_) e->type = s_.zonk(t);
    for (const Var* v : boundVars_) v->type = s_.zonk(v->type);
    for (const GlobalFunction& g : m_.functions()) g.var->type = s_.zonk(globalTypes_.at(g.var));
  }

 private:
  // ---- errors ----
  [[noreturn]] void fail(SourceLoc loc, const std::string& msg) const {
    throw Error(current_ && current_->fromPrelude ? "<prelude>" : m_.file(), loc, msg);
  }
  std::string show(const Type* t) const { return typeToString(s_.zonk(t)); }

  // Where to report a problem with `e`: variables and globals are shared by every
  // use (their location is the binding), so a use is reported at its context.
  static SourceLoc useLoc(const Expr* e, SourceLoc context) {
    return e->kind == ExprKind::Var || e->kind == ExprKind::GlobalVar ? context : e->loc;
  }

  // `context` builds the error's lead-in; it runs only when unification fails.
  template <class Context>
  const Type* unifyAt(SourceLoc loc, const Type* expected, const Type* actual, UnifyMode mode, Context&& context) {
    std::vector<DeferredCheck>& deferred = s_.deferredChecks();
    size_t before = deferred.size();
    const Type* joined;
    try {
      joined = s_.unify(expected, actual, mode);
    } catch (const TypeMismatch& m) {
      fail(loc, std::string(context()) + ": " + m.what);
    }
    if (deferred.size() != before) {
      deferredAt_.push_back({loc, std::string(context()), current_});
      for (size_t i = before; i < deferred.size(); ++i) deferred[i].tag = static_cast<uint32_t>(deferredAt_.size() - 1);
    }
    return joined;
  }

  // The checks the solver deferred (solver.h says why), reported on the last pass.
  void failDeferredChecks() {
    for (const DeferredCheck& d : s_.deferredChecks()) {
      if (s_.compatible(d.checked, d.found)) continue;
      const DeferredSite& at = deferredAt_[d.tag];
      current_ = at.function;
      const Type* expected = d.foundExpected ? d.found : d.checked;
      const Type* found = d.foundExpected ? d.checked : d.found;
      fail(at.loc, at.context + ": expected " + show(expected) + ", but found " + show(found));
    }
  }

  // ---- signatures ----
  const Type* paramType(const Var* v) {
    const Type* t = v->annotation ? v->annotation : s_.meta({v, 0});
    bindVar(v, t);
    return t;
  }

  const FuncType* signature(const Function* f) {
    std::vector<const Type*> params;
    for (const Var* p : f->params) params.push_back(paramType(p));
    const Type* r = f->resultAnnotation ? f->resultAnnotation : s_.meta({f, 0});
    return funcType(a_, params, r, f->typeParams);
  }

  // Replaces a polymorphic function type's parameters by fresh unknowns.
  const Type* instantiate(const FuncType* ft, MetaKey site) {
    if (ft->typeParams.empty()) return ft;
    std::vector<const Type*> args;
    for (uint32_t i = 0; i < ft->typeParams.size(); ++i)
      args.push_back(s_.meta({site.site, site.slot * 64 + 1000 + i}));
    // Through what is solved so far: a result inferred from the body (no return
    // annotation) is an unknown bound to, say, the type parameter A, and A must
    // be replaced there too.
    std::vector<const Type*> params;
    for (const Type* p : ft->params) params.push_back(s_.zonk(p));
    auto* mono = funcType(a_, params, s_.zonk(ft->result));
    return substitute(a_, mono, ft->typeParams, args);
  }

  // ---- functions ----
  const Type* checkFunction(const Function* f) {
    const FuncType* sig = nullptr;
    if (current_ && current_->fn == f) {
      sig = asFunc(globalTypes_.at(current_->var));
      for (const Var* p : f->params)
        if (!p->annotation) globalParams_.push_back({p, f, current_->var->name});
    } else {
      sig = signature(f);
    }
    const GlobalFunction* global = current_ && current_->fn == f ? current_ : nullptr;
    auto what = [global] { return global ? "@" + std::string(global->var->name) : std::string("the function"); };
    // Each branch in tail position is checked against a declared result type on
    // its own: joined first, an arm of (1, 16) and one of (1, 8) made (1, ?),
    // which a declared (1, 8) accepted, and the wrong arm failed only at run time.
    if (f->resultAnnotation && (f->body->kind == ExprKind::If || f->body->kind == ExprKind::Match || f->body->kind == ExprKind::Let))
      markTails(f->body, f, 1, f->loc, {f->resultAnnotation, what(), f->loc});
    const Type* body = infer(f->body, f, 1);
    // A polymorphic function returned where a monomorphic function type is
    // declared is instantiated there, as an argument is (TVM's eta-expansion
    // tests: `def @main[A]() -> fn(A, List[A]) -> List[A] { fn [A](...) {...} }`).
    if (auto* want = asFunc(f->resultAnnotation); want && want->typeParams.empty())
      if (auto* pf = asFunc(s_.resolve(body)); pf && !pf->typeParams.empty()) body = instantiate(pf, {f, 2});
    if (f->resultAnnotation)
      unifyAt(useLoc(f->body, f->loc), f->resultAnnotation, body, UnifyMode::Check, [&] { return what() + " is declared to return " + show(f->resultAnnotation) + ", but its body has another type"; });
    else
      unifyAt(useLoc(f->body, f->loc), sig->result, body, UnifyMode::Join, [&] { return what() + "'s result"; });
    record(f, sig);
    return sig;
  }

  void record(const Expr* e, const Type* t) { exprTypes_.emplace_back(e, t); }

  // A place whose value a function returns (a branch of an `if` or a clause of
  // a `match` in tail position, through `let`s), named by the (site, slot) that
  // infer() is called with: a Var node is shared by all its uses, so the place,
  // not the node, is what is in tail position.
  struct TailCheck {
    const Type* declared;
    std::string function;
    SourceLoc context;  // where to report a Var's mismatch (the branch or clause)
    const char* place = "its body";
  };
  void markTails(const Expr* e, const void* site, uint32_t slot, SourceLoc context, TailCheck check,
                 const char* place = "its body") {
    switch (e->kind) {
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        markTails(i->thenBranch, i, 2, useLoc(i->thenBranch, i->loc), check, "the 'then' branch of this 'if'");
        markTails(i->elseBranch, i, 3, useLoc(i->elseBranch, i->loc), check, "the 'else' branch of this 'if'");
        return;
      }
      case ExprKind::Match:
        for (const Clause& c : static_cast<const Match*>(e)->clauses) markTails(c.body, &c, 1, c.pattern->loc, check, "this clause of 'match'");
        return;
      case ExprKind::Let: {
        const Let* last = static_cast<const Let*>(e);
        while (last->body->kind == ExprKind::Let) last = static_cast<const Let*>(last->body);
        markTails(last->body, last, 2, useLoc(last->body, last->loc), check, place);
        return;
      }
      default:
        check.context = context;
        check.place = place;
        tails_[{site, slot}] = std::move(check);
    }
  }

  // ---- expressions ----
  // `site` and `slot` name the place `e` occurs in. Global references are one node
  // per name, so a polymorphic global is instantiated per place, not per node.
  const Type* infer(const Expr* e, const void* site, uint32_t slot) {
    if (e->kind == ExprKind::GlobalVar) return globalRef(static_cast<const GlobalVar*>(e), {site, slot});
    const Type* t = inferNode(e);
    if (!tails_.empty())
      if (auto it = tails_.find({site, slot}); it != tails_.end()) {
        const TailCheck& c = it->second;
        unifyAt(useLoc(e, c.context), c.declared, t, UnifyMode::Check,
                [&] { return c.function + " is declared to return " + show(c.declared) + ", but " + c.place + " has another type"; });
      }
    record(e, t);
    return t;
  }

  const Type* inferNode(const Expr* e) {
    switch (e->kind) {
      case ExprKind::Var: {
        // Unbound only inside its own let's value when that is not a function
        // (`let %f = %f() + 1`): a function may call itself, nothing else can be
        // made of itself.
        const Var* v = static_cast<const Var*>(e);
        if (!v->type)
          fail(e->loc, "%" + std::string(v->name) + " is used in its own value; only a function (fn) bound by let may refer to itself");
        return v->type;
      }
      case ExprKind::GlobalVar: return globalRef(static_cast<const GlobalVar*>(e), {e, 0});
      case ExprKind::Constant: return scalar(static_cast<const Constant*>(e)->dtype);
      case ExprKind::Op:
        fail(e->loc, "operator '" + static_cast<const OpRef*>(e)->op->name + "' must be called, not used as a value");
      case ExprKind::Ctor: {
        // A constructor without fields is a value (`Nil`); one with fields is a function (`Cons`).
        const Constructor* c = static_cast<const CtorRef*>(e)->ctor;
        const Type* ft = ctorType(c, e);
        return c->fields.empty() ? asFunc(ft)->result : ft;
      }
      case ExprKind::Call: return inferCall(static_cast<const Call*>(e));
      case ExprKind::Let: return inferLet(static_cast<const Let*>(e));
      case ExprKind::If: return inferIf(static_cast<const If*>(e));
      case ExprKind::Match: return inferMatch(static_cast<const Match*>(e));
      case ExprKind::Function: return checkFunction(static_cast<const Function*>(e));
      case ExprKind::Tuple: {
        std::vector<const Type*> f;
        auto* tup = static_cast<const Tuple*>(e);
        for (uint32_t k = 0; k < tup->fields.size(); ++k) f.push_back(infer(tup->fields[k], tup, 2 + k));
        return tupleType(a_, f);
      }
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        const Type* t = known(infer(g->tuple, g, 1));
        const TupleType* tt = asTuple(t);
        if (!tt) {
          if (t->kind == TypeKind::Meta) fail(g->loc, "the type of this tuple must be known here; add a type annotation");
          fail(g->loc, "field access .N needs a tuple, but the value has type " + show(t));
        }
        if (g->index >= tt->fields.size())
          fail(g->loc, "tuple field ." + std::to_string(g->index) + " is out of range for a tuple of " +
                           std::to_string(tt->fields.size()) + " field(s), of type " + show(tt));
        return tt->fields[g->index];
      }
      case ExprKind::RefOp: return inferRefOp(static_cast<const RefOp*>(e));
    }
    fail(e->loc, "unknown expression");
  }

  // ref(v): ref(T) for v: T. ref_read(r): T for r: ref(T). ref_write(r, v): () once
  // v fits T (a cell's content type never changes: it is written after it is made).
  const Type* inferRefOp(const RefOp* r) {
    if (r->op == RefOpKind::Create) return refType(a_, infer(r->args[0], r, 1));
    const Type* content = s_.meta({r, 0});
    const Type* cell = infer(r->args[0], r, 1);
    unifyAt(useLoc(r->args[0], r->loc), refType(a_, content), cell, UnifyMode::Join,
            [&] { return std::string(r->op == RefOpKind::Read ? "ref_read" : "ref_write") + " needs a reference"; });
    if (r->op == RefOpKind::Read) return content;
    const Type* value = infer(r->args[1], r, 2);
    unifyAt(useLoc(r->args[1], r->loc), content, value, UnifyMode::Check,
            [&] { return "ref_write of a reference to " + show(content) + ": the value has another type"; });
    return tupleType(a_, {});
  }

  // The type of `t`, after trying pending operator rules if it is still unknown.
  const Type* known(const Type* t) {
    const Type* r = s_.resolve(t);
    if (r->kind == TypeKind::Meta) {
      flushPending(false);
      r = s_.resolve(t);
    }
    return r;
  }

  const Type* scalar(DType d) {
    auto& c = scalars_[static_cast<int>(d)];
    if (!c) c = scalarType(a_, d);
    return c;
  }

  const Type* globalRef(const GlobalVar* g, MetaKey site) {
    auto it = globalTypes_.find(g);
    if (it == globalTypes_.end()) fail(g->loc, "undefined global function @" + std::string(g->name));
    return instantiate(asFunc(it->second), site);
  }

  // A constructor as a function: fn(fields) -> Adt[params], instantiated.
  const Type* ctorType(const Constructor* c, const void* node) {
    MetaKey site{node, 0};
    const TypeDef* def = c->owner;
    std::vector<const Type*> params(def->params.begin(), def->params.end());
    auto* fn = funcType(a_, c->fields, adtType(a_, def, params), def->params);
    return instantiate(fn, site);
  }

  const Type* inferLet(const Let* first) {
    std::vector<const Let*> chain;
    const Expr* e = first;
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      chain.push_back(l);
      const Var* v = l->var;
      if (l->value->kind == ExprKind::Function) {
        // The variable is in scope in its own value (a recursive local function).
        const Type* vt = v->annotation ? v->annotation : s_.meta({v, 0});
        bindVar(v, vt);
        const Type* ft = infer(l->value, l, 1);
        unifyAt(useLoc(l->value, l->loc), vt, ft, v->annotation ? UnifyMode::Check : UnifyMode::Join, [&] { return "the value bound to %" + std::string(v->name); });
      } else {
        const Type* vt = infer(l->value, l, 1);
        if (v->annotation) {
          unifyAt(useLoc(l->value, l->loc), v->annotation, vt, UnifyMode::Check, [&] { return "the value bound to %" + std::string(v->name) + " does not match its annotation"; });
          vt = v->annotation;
        }
        bindVar(v, vt);
      }
      e = l->body;
    }
    const Type* body = infer(e, chain.back(), 2);
    for (const Let* l : chain) record(l, body);
    return body;
  }

  void checkCondition(const Expr* cond, const Type* t) {
    const Type* r = s_.zonk(t);
    const TensorType* tt = asTensor(r);
    if (!tt || tt->rank() != 0 || !(isBool(tt->dtype) || isInt(tt->dtype)))
      fail(useLoc(static_cast<const If*>(cond)->cond, cond->loc), "the condition of 'if' must be a bool or integer scalar, but has type " + show(r));
  }

  const Type* inferIf(const If* i) {
    const Type* c = known(infer(i->cond, i, 1));
    if (c->kind == TypeKind::Meta) conditions_.push_back({i, c});
    else checkCondition(i, c);
    const Type* t = infer(i->thenBranch, i, 2);
    const Type* f = infer(i->elseBranch, i, 3);
    return unifyAt(i->loc, t, f, UnifyMode::Join, [&] { return "the branches of 'if' have different types"; });
  }

  void checkPattern(const Pattern* p, const Type* t) {
    switch (p->kind) {
      case PatternKind::Wildcard: return;
      case PatternKind::Var: {
        const Var* v = static_cast<const PatternVar*>(p)->var;
        if (v->annotation) {
          unifyAt(p->loc, v->annotation, t, UnifyMode::Check, [&] { return "pattern variable %" + std::string(v->name); });
          bindVar(v, v->annotation);
        } else {
          bindVar(v, t);
        }
        return;
      }
      case PatternKind::Ctor: {
        auto* pc = static_cast<const PatternCtor*>(p);
        auto* fn = asFunc(ctorType(pc->ctor, p));
        unifyAt(p->loc, fn->result, t, UnifyMode::Check, [&] { return "pattern " + std::string(pc->ctor->name) + " cannot match this value"; });
        for (size_t k = 0; k < pc->args.size(); ++k) checkPattern(pc->args[k], fn->params[k]);
        return;
      }
      case PatternKind::Tuple: {
        auto* pt = static_cast<const PatternTuple*>(p);
        const Type* r = known(t);
        if (r->kind == TypeKind::Meta) {
          std::vector<const Type*> fields;
          for (uint32_t k = 0; k < pt->fields.size(); ++k) fields.push_back(s_.meta({p, k}));
          r = s_.resolve(unifyAt(p->loc, t, tupleType(a_, fields), UnifyMode::Join, [&] { return "tuple pattern"; }));
          r = s_.resolve(r);
        }
        const TupleType* tt = asTuple(r);
        if (!tt || tt->fields.size() != pt->fields.size())
          fail(p->loc, "a tuple pattern of " + std::to_string(pt->fields.size()) +
                           " field(s) cannot match a value of type " + show(t));
        for (size_t k = 0; k < pt->fields.size(); ++k) checkPattern(pt->fields[k], tt->fields[k]);
        return;
      }
    }
  }

  const Type* inferMatch(const Match* mt) {
    const Type* st = infer(mt->scrutinee, mt, 1);
    scrutineeTypes_[mt] = st;
    const Type* result = nullptr;
    for (const Clause& c : mt->clauses) {
      checkPattern(c.pattern, st);
      const Type* bt = infer(c.body, &c, 1);
      result = result ? unifyAt(c.body->loc, result, bt, UnifyMode::Join, [&] { return "the clauses of 'match' have different types"; })
                      : bt;
    }
    matches_.push_back(mt);
    return result;
  }

  // ---- calls ----
  const Type* inferCall(const Call* c) {
    switch (c->callee->kind) {
      case ExprKind::Op: return inferOpCall(c);
      case ExprKind::GlobalVar: {
        const Type* ft = globalRef(static_cast<const GlobalVar*>(c->callee), {c, 1});
        return applyFunction(c, ft, [c] { return "@" + std::string(static_cast<const GlobalVar*>(c->callee)->name); });
      }
      case ExprKind::Ctor: {
        const Type* ft = ctorType(static_cast<const CtorRef*>(c->callee)->ctor, c->callee);
        record(c->callee, ft);
        return applyFunction(c, ft, [c] { return "constructor " + std::string(static_cast<const CtorRef*>(c->callee)->ctor->name); });
      }
      default: {
        const Type* ft = known(infer(c->callee, c, 1));
        if (ft->kind == TypeKind::Meta) {
          std::vector<const Type*> params;
          for (uint32_t i = 0; i < c->args.size(); ++i) params.push_back(s_.meta({c, 100 + i}));
          unifyAt(c->loc, ft, funcType(a_, params, s_.meta({c, 99})), UnifyMode::Join, [&] { return "the called function"; });
          ft = s_.resolve(ft);
        }
        if (auto* f = asFunc(ft); f && !f->typeParams.empty()) ft = instantiate(f, {c, 0});
        return applyFunction(c, ft, [c] {
          return c->callee->kind == ExprKind::Var ? "%" + std::string(static_cast<const Var*>(c->callee)->name)
                                                  : std::string("the function");
        });
      }
    }
  }

  template <class NameFn>
  const Type* applyFunction(const Call* c, const Type* calleeType, NameFn&& name) {
    const FuncType* ft = asFunc(s_.resolve(calleeType));
    if (!ft) fail(c->loc, name() + " is not a function; it has type " + show(calleeType));
    if (ft->params.size() != c->args.size())
      fail(c->loc, name() + " takes " + std::to_string(ft->params.size()) + " argument(s), but " +
                       std::to_string(c->args.size()) + " were given");
    for (size_t i = 0; i < c->args.size(); ++i) {
      const Type* at = infer(c->args[i], c, 2 + static_cast<uint32_t>(i));
      // A polymorphic function passed where a function is expected is
      // instantiated there (TVM: `@app(fn [T](%y: T) -> T { %y }, %l)`).
      if (auto* pf = asFunc(s_.resolve(at)); pf && !pf->typeParams.empty())
        at = instantiate(pf, {c, 64 + static_cast<uint32_t>(i)});
      unifyAt(useLoc(c->args[i], c->loc), ft->params[i], at, UnifyMode::Check, [&] { return "argument " + std::to_string(i + 1) + " of " + name(); });
    }
    return ft->result;
  }

  struct PendingRule {
    const Call* call;
    std::vector<const Type*> args;
    const Type* result;
  };

  const Type* inferOpCall(const Call* c) {
    const ops::OpDef* op = static_cast<const OpRef*>(c->callee)->op;
    std::vector<const Type*> args;
    for (uint32_t k = 0; k < c->args.size(); ++k) args.push_back(infer(c->args[k], c, 2 + k));
    static const ops::AttrMap kNoAttrs;
    const ops::AttrMap& attrs = c->attrs ? *c->attrs : kNoAttrs;
    if (op->annotation) {
      try {
        op->infer({}, attrs);
      } catch (const ops::OpError& err) {
        fail(c->loc, err.what());
      }
      return args[0];
    }
    PendingRule p{c, std::move(args), nullptr};
    if (const Type* direct = applyRule(p)) return direct;
    // Operands not known yet: the result is an unknown until the rule can run.
    p.result = s_.meta({c, 0});
    pending_.push_back(std::move(p));
    return p.result;
  }

  // Runs a deferred rule if its operands are known now; false if not yet.
  bool tryRule(const PendingRule& p) {
    const Type* rt = applyRule(p);
    if (!rt) return false;
    unifyAt(p.call->loc, p.result, rt, UnifyMode::Join, [&] {
      return "the result of '" + static_cast<const OpRef*>(p.call->callee)->op->name + "'";
    });
    return true;
  }

  // The operator's result type from its shape rule, or null if an operand is unknown.
  const Type* applyRule(const PendingRule& p) {
    const ops::OpDef* op = static_cast<const OpRef*>(p.call->callee)->op;
    std::vector<ops::TensorDesc> descs;
    auto addTensor = [&](const Type* t, const Expr* arg, const char* what) {
      const TensorType* tt = asTensor(t);
      if (!tt)
        fail(useLoc(arg, p.call->loc), "operator '" + op->name + "' expects " + what + ", but operand has type " + show(t));
      descs.push_back(toDesc(tt));
    };
    for (size_t i = 0; i < p.args.size(); ++i) {
      const Type* t = s_.zonk(p.args[i]);
      if (s_.resolve(t)->kind == TypeKind::Meta) return nullptr;
      if (op->tupleInput) {
        const TupleType* tt = asTuple(t);
        if (!tt) fail(useLoc(p.call->args[i], p.call->loc), "operator '" + op->name + "' expects a tuple of tensors, but operand has type " + show(t));
        for (const Type* f : tt->fields)
          if (s_.resolve(f)->kind == TypeKind::Meta) return nullptr;
        for (const Type* f : tt->fields) addTensor(s_.zonk(f), p.call->args[i], "a tuple of tensors");
      } else {
        addTensor(t, p.call->args[i], "a tensor");
      }
    }
    for (const Type* t : p.args) s_.observe(t);
    static const ops::AttrMap kNoAttrs;
    std::vector<ops::TensorDesc> outs;
    try {
      outs = op->infer(descs, p.call->attrs ? *p.call->attrs : kNoAttrs);
    } catch (const ops::OpError& err) {
      fail(p.call->loc, err.what());
    }
    const Type* rt;
    if (op->tupleOutput) {
      std::vector<const Type*> fields;
      for (const auto& d : outs) fields.push_back(fromDesc(a_, d));
      rt = tupleType(a_, fields);
    } else {
      rt = fromDesc(a_, outs.at(0));
    }
    return rt;
  }

  void flushPending(bool final) {
    bool progress = true;
    while (progress && !pending_.empty()) {
      progress = false;
      std::vector<PendingRule> still;
      for (auto& p : pending_) {
        if (tryRule(p)) progress = true;
        else still.push_back(std::move(p));
      }
      pending_ = std::move(still);
    }
    if (final && !pending_.empty()) {
      const PendingRule& p = pending_.front();
      fail(p.call->loc, "cannot infer the operand types of '" + static_cast<const OpRef*>(p.call->callee)->op->name +
                            "'; add type annotations");
    }
  }

  Module& m_;
  Arena& a_;
  TypeSolver s_;
  const GlobalFunction* current_ = nullptr;
  std::unordered_map<const GlobalVar*, const Type*> globalTypes_;
  std::vector<const Var*> boundVars_;  // every variable bound in this pass; its type is in Var::type
  std::vector<std::pair<const Expr*, const Type*>> exprTypes_;
  std::unordered_map<MetaKey, TailCheck, MetaKeyHash> tails_;

  // A variable's type during a pass lives in its own node (the slot that ends up
  // holding its checked type); every pass binds a variable before any use.
  void bindVar(const Var* v, const Type* t) {
    v->type = t;
    boundVars_.push_back(v);
  }
  std::unordered_map<const Expr*, const Type*> scrutineeTypes_;
  struct GlobalParam {
    const Var* var;
    const Function* fn;
    std::string_view global;
  };
  std::vector<GlobalParam> globalParams_;
  std::vector<std::pair<const Expr*, const Type*>> conditions_;
  std::vector<const Match*> matches_;
  std::vector<PendingRule> pending_;
  // Where each deferred check was made (DeferredCheck::tag indexes it).
  struct DeferredSite {
    SourceLoc loc;
    std::string context;
    const GlobalFunction* function;
  };
  std::vector<DeferredSite> deferredAt_;
  const Type* scalars_[kNumDTypes] = {};
};

}  // namespace

void inferTypes(Module& module) {
  Hints hints;
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    Inferer inf(module, hints);
    inf.run();
    if (!inf.needsAnotherPass()) {
      inf.finish();
      return;
    }
    hints = inf.hints();
  }
  throw Error(module.file(), {}, "type inference did not converge");
}

}  // namespace kiln::typecheck
