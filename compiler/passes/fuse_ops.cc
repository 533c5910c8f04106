// Operator fusion: grouping by union-find over each region's operator calls, then
// a rewrite that turns each group into a primitive function and a call.
#include "compiler/passes/fuse_ops.h"

#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/mutator.h"
#include "compiler/ir/visit.h"
#include "compiler/passes/merge_kernels.h"

namespace kiln::compiler {

using namespace kiln::ir;

namespace {

const ops::OpDef* opOf(const Expr* e) {
  if (e->kind != ExprKind::Call) return nullptr;
  auto* c = static_cast<const Call*>(e);
  if (c->callee->kind != ExprKind::Op) return nullptr;
  const ops::OpDef* op = static_cast<const OpRef*>(c->callee)->op;
  return op->annotation ? nullptr : op;
}

bool isAnchor(ops::OpPattern p) { return p == ops::OpPattern::CommReduce || p == ops::OpPattern::OutEWiseFusable; }

// Finds the groups of one function: which operator calls fuse with which.
class Grouping {
 public:
  explicit Grouping(const FuseOptions& opts) : opts_(opts) {}

  void run(const Expr* body, bool fuse) {
    countUses(body);
    addVariableUses();
    collect(body, 0);
    if (fuse)
      for (const Call* c : calls_) fuseInto(c);
  }

  const Call* rootOf(const Call* c) { return find(c); }
  bool isMember(const Expr* e) const { return region_.count(e) != 0; }
  // The operator call a let-bound variable holds, if any.
  const Call* callOfVar(const Var* v) const {
    auto it = varCall_.find(v);
    return it == varCall_.end() ? nullptr : it->second;
  }
  // The operator call that `e` denotes (directly or through a let-bound variable).
  const Call* asCall(const Expr* e) const {
    if (e->kind == ExprKind::Var) return callOfVar(static_cast<const Var*>(e));
    return opOf(e) ? static_cast<const Call*>(e) : nullptr;
  }
  // Whether `c` is the root of its group (its value leaves the group).
  bool isRoot(const Call* c) { return find(c) == c; }
  // Whether every use of `v` is as the callee of a call.
  bool onlyCalled(const Var* v) const {
    auto all = varUses_.find(v), called = calleeUses_.find(v);
    return all == varUses_.end() || (called != calleeUses_.end() && called->second == all->second);
  }

 private:
  // Uses of each operator call: direct nesting as an argument, or a reference to the variable bound to it.
  void countUses(const Expr* root) {
    std::vector<const Expr*> stack{root};
    std::unordered_set<const Expr*> seen;
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      // A variable node is shared by all its uses: count every visit.
      if (e->kind == ExprKind::Var) {
        ++varUses_[static_cast<const Var*>(e)];
        continue;
      }
      if (!seen.insert(e).second) {
        if (e->kind == ExprKind::Call) ++uses_[e];  // a shared subexpression: another use
        continue;
      }
      switch (e->kind) {
        case ExprKind::Call: {
          auto* c = static_cast<const Call*>(e);
          ++uses_[e];
          if (c->callee->kind == ExprKind::Var) ++calleeUses_[static_cast<const Var*>(c->callee)];
          stack.push_back(c->callee);
          for (const Expr* a : c->args) stack.push_back(a);
          break;
        }
        case ExprKind::Let: {
          auto* l = static_cast<const Let*>(e);
          if (opOf(l->value)) varCall_[l->var] = static_cast<const Call*>(l->value);
          --uses_[l->value];  // binding a value is not a use of it
          stack.push_back(l->value);
          stack.push_back(l->body);
          break;
        }
        case ExprKind::If: {
          auto* i = static_cast<const If*>(e);
          stack.insert(stack.end(), {i->cond, i->thenBranch, i->elseBranch});
          break;
        }
        case ExprKind::Match: {
          auto* m = static_cast<const Match*>(e);
          stack.push_back(m->scrutinee);
          for (const Clause& c : m->clauses) stack.push_back(c.body);
          break;
        }
        case ExprKind::Function: stack.push_back(static_cast<const Function*>(e)->body); break;
        case ExprKind::Tuple:
          for (const Expr* f : static_cast<const Tuple*>(e)->fields) stack.push_back(f);
          break;
        case ExprKind::TupleGet: stack.push_back(static_cast<const TupleGet*>(e)->tuple); break;
        case ExprKind::RefOp:
          for (const Expr* a : static_cast<const RefOp*>(e)->args) stack.push_back(a);
          break;
        default: break;
      }
    }
  }

  // Direct uses plus uses through the variables bound to the call (counted once, in run()).
  int usesOf(const Call* c) const {
    auto it = uses_.find(c);
    return it == uses_.end() ? 0 : it->second;
  }

  void addVariableUses() {
    for (const auto& [v, call] : varCall_) {
      auto vu = varUses_.find(v);
      if (vu != varUses_.end()) uses_[call] += vu->second;
    }
  }

  // Post-order over one region; branches and closures are regions of their own.
  void collect(const Expr* e, int region) {
    std::vector<std::pair<const Expr*, bool>> stack{{e, false}};
    while (!stack.empty()) {
      auto [x, done] = stack.back();
      stack.pop_back();
      if (done) {
        if (opOf(x) && region_.emplace(x, region).second) calls_.push_back(static_cast<const Call*>(x));
        continue;
      }
      stack.push_back({x, true});
      switch (x->kind) {
        case ExprKind::Call: {
          auto* c = static_cast<const Call*>(x);
          for (auto it = c->args.rbegin(); it != c->args.rend(); ++it) stack.push_back({*it, false});
          if (!opOf(x)) stack.push_back({c->callee, false});
          break;
        }
        case ExprKind::Let: {
          auto* l = static_cast<const Let*>(x);
          stack.push_back({l->body, false});
          stack.push_back({l->value, false});
          break;
        }
        case ExprKind::If: {
          auto* i = static_cast<const If*>(x);
          collect(i->thenBranch, ++regions_);
          collect(i->elseBranch, ++regions_);
          stack.push_back({i->cond, false});
          break;
        }
        case ExprKind::Match: {
          auto* m = static_cast<const Match*>(x);
          for (const Clause& c : m->clauses) collect(c.body, ++regions_);
          stack.push_back({m->scrutinee, false});
          break;
        }
        case ExprKind::Function:
          // A kernel written as such (Primitive=1) stays whole.
          if (!static_cast<const Function*>(x)->primitive) collect(static_cast<const Function*>(x)->body, ++regions_);
          break;
        case ExprKind::Tuple:
          for (const Expr* f : static_cast<const Tuple*>(x)->fields) stack.push_back({f, false});
          break;
        case ExprKind::TupleGet: stack.push_back({static_cast<const TupleGet*>(x)->tuple, false}); break;
        case ExprKind::RefOp:
          for (const Expr* a : static_cast<const RefOp*>(x)->args) stack.push_back({a, false});
          break;
        default: break;
      }
    }
  }

  const Call* find(const Call* c) {
    auto it = parent_.find(c);
    if (it == parent_.end() || it->second == c) return c;
    const Call* r = find(it->second);
    parent_[c] = r;
    return r;
  }

  // The producers among C's operands (through tuples for concatenate/stack).
  std::vector<const Call*> producers(const Call* c) {
    std::vector<const Call*> out;
    for (const Expr* a : c->args) {
      if (a->kind == ExprKind::Tuple) {
        for (const Expr* f : static_cast<const Tuple*>(a)->fields)
          if (const Call* p = asCall(f)) out.push_back(p);
      } else if (const Call* p = asCall(a)) {
        out.push_back(p);
      }
    }
    return out;
  }

  // A concatenation that is a matrix product's data operand (`dense(concat((l, r)))`,
  // a tree or LSTM cell reading two states): the product's kernel copies it into
  // a scratch operand itself, which saves the separate kernel's call and output
  // tensor. The copy is made either way; other producers (a reshape the VM makes
  // as a view, element-wise work) would add one, and stay outside.
  const Call* concatOperand(const Call* c, const ops::OpDef* cop) const {
    if (cop->name != "nn.dense" && cop->name != "nn.matmul" && cop->name != "nn.batch_matmul") return nullptr;
    if (c->args.empty()) return nullptr;
    const Call* p = asCall(c->args[0]);
    return p && opOf(p)->name == "concatenate" ? p : nullptr;
  }

  // Joins the group of `p` (rooted at p, its only exit into c) to c's group.
  void join(const Call* p, const Call* c) {
    const Call* pr = find(p);
    const Call* cr = find(c);
    if (pr != p || pr == cr) return;
    parent_[pr] = cr;
    anchors_[cr] += anchors_[pr];
  }

  // A float32 NCHW/OIHW conv2d.
  static bool plainConv(const Call* c) {
    const ops::OpDef* op = opOf(c);
    if (!op || op->name != "nn.conv2d" || c->args.size() != 2 || !c->type || c->type->kind != TypeKind::Tensor) return false;
    if (static_cast<const TensorType*>(c->type)->dtype != DType::Float32) return false;
    ops::AttrMap none;
    ops::AttrReader attrs(op->name, c->attrs ? *c->attrs : none);
    return attrs.getString("data_layout", "NCHW") == "NCHW" && attrs.getString("kernel_layout", "OIHW") == "OIHW";
  }

  // The group whose root is `p` when it is a convolution and the epilogue the
  // runtime applies itself (`relu?(bias_add?(conv2d(x, w), %b))`, kernel_ir's
  // PostOps, with %b not computed here), to be chained into the convolution
  // `c` it feeds: the pair is then one kernel (jit::sconv2dPair), in which the
  // first convolution's output is never written out whole.
  bool chainableInto(const Call* p, const Call* c) {
    if (!opts_.convChains || !plainConv(c) || region_[p] != region_[c] || usesOf(p) != 1 || find(p) != p ||
        anchors_[p] != 1)
      return false;
    const Call* q = p;
    if (opOf(q)->name == "nn.relu") {
      q = asCall(q->args[0]);
      if (!q || usesOf(q) != 1 || find(q) != p) return false;
    }
    if (opOf(q)->name == "nn.bias_add") {
      ops::AttrMap none;
      int64_t axis = ops::AttrReader("nn.bias_add", q->attrs ? *q->attrs : none).getInt("axis", 1);
      if ((axis != 1 && axis != -3) || q->args.size() != 2 || asCall(q->args[1])) return false;
      q = asCall(q->args[0]);
      if (!q || usesOf(q) != 1 || find(q) != p) return false;
    }
    return plainConv(q) && find(q) == p;
  }

  void fuseInto(const Call* c) {
    const ops::OpDef* cop = opOf(c);
    anchors_[c] = isAnchor(cop->pattern) ? 1 : 0;
    if (cop->pattern == ops::OpPattern::OutEWiseFusable) {
      // dense/matmul/conv2d inline no other input, but for a concatenated data
      // operand of a product and a chained convolution.
      const Call* p = concatOperand(c, cop);
      if (p && region_[p] == region_[c] && usesOf(p) == 1 && anchors_[find(p)] == 0) join(p, c);
      const Call* producer = c->args.empty() ? nullptr : asCall(c->args[0]);
      if (producer && chainableInto(producer, c)) join(producer, c);
      return;
    }
    // Opaque operators stand alone.
    if (cop->pattern == ops::OpPattern::Opaque) return;
    for (const Call* p : producers(c)) {
      const ops::OpDef* pop = opOf(p);
      if (region_[p] != region_[c] || usesOf(p) != 1 || pop->tupleOutput) continue;
      const Call* pr = find(p);
      const Call* cr = find(c);
      if (pr == cr) continue;
      // Injective work feeds anything up to a reduction; element-wise work after a
      // reduction or a dense/conv is its epilogue.
      bool ok = (pop->pattern <= ops::OpPattern::Injective && cop->pattern <= ops::OpPattern::CommReduce) ||
                (isAnchor(pop->pattern) && cop->pattern <= ops::OpPattern::Broadcast);
      if (!ok || (anchors_[pr] > 0 && anchors_[cr] > 0)) continue;
      // The producer's group must have p as its root (its only exit is into c).
      join(p, c);
    }
  }

  const FuseOptions& opts_;
  std::vector<const Call*> calls_;
  std::unordered_map<const Expr*, int> region_;
  int regions_ = 0;
  std::unordered_map<const Expr*, int> uses_;
  std::unordered_map<const Var*, int> varUses_, calleeUses_;
  std::unordered_map<const Var*, const Call*> varCall_;
  std::unordered_map<const Call*, const Call*> parent_;
  std::unordered_map<const Call*, int> anchors_;
};

// Rewrites a function body: group roots become calls of primitive functions, and
// bindings of non-root members disappear into their kernels.
class FuseRewriter : public ExprMutator {
 public:
  FuseRewriter(Arena& a, Grouping& g, const std::string& file) : ExprMutator(a), g_(g), a_(a), file_(file) {}

  // The kernels this rewrite made, each called at one place (what may merge).
  const std::unordered_set<const Function*>& made() const { return made_; }

 protected:
  const Expr* visit(const Expr* e) override {
    // A kernel written as such (Primitive=1, as TVM prints fused programs) stays
    // whole, and is only ever called: a kernel is not a value.
    if (e->kind == ExprKind::Function && static_cast<const Function*>(e)->primitive)
      throw Error(file_, e->loc, "a function marked Primitive=1 can only be called, not used as a value");
    if (e->kind == ExprKind::Call) {
      // `%0 = fn (..., Primitive=1) {...}; %0(%x)`: the kernel is called directly.
      auto* c = static_cast<const Call*>(e);
      const Expr* kernel = c->callee->kind == ExprKind::Function && static_cast<const Function*>(c->callee)->primitive
                               ? c->callee
                               : nullptr;
      if (c->callee->kind == ExprKind::Var) {
        auto it = inlined_.find(static_cast<const Var*>(c->callee));
        if (it != inlined_.end()) kernel = it->second;
      }
      if (kernel) {
        std::vector<const Expr*> args;
        for (const Expr* a : c->args) args.push_back(mutate(a));
        return typed(builder().call(kernel, args, c->attrs, c->loc), c);
      }
    }
    if (e->kind == ExprKind::Let) {
      // Drop bindings whose value moved into a kernel, and bindings of written
      // kernels used only as callees (they are inlined); keep walking the chain.
      const Expr* x = e;
      std::vector<const Let*> kept;
      while (x->kind == ExprKind::Let) {
        auto* l = static_cast<const Let*>(x);
        const Call* c = opOf(l->value) ? static_cast<const Call*>(l->value) : nullptr;
        bool kernelValue = l->value->kind == ExprKind::Function && static_cast<const Function*>(l->value)->primitive;
        if (kernelValue && !g_.onlyCalled(l->var))
          throw Error(file_, l->var->loc, "%" + std::string(l->var->name) + " holds a function marked Primitive=1, which can only be called, not used as a value");
        if (kernelValue) inlined_[l->var] = l->value;
        else if (!c || g_.isRoot(c)) kept.push_back(l);
        x = l->body;
      }
      const Expr* body = mutate(x);
      for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
        const Let* l = *it;
        body = typed(builder().let(l->var, mutate(l->value), body, l->graphStyle, l->loc), l);
      }
      return body;
    }
    if (opOf(e) && g_.isRoot(static_cast<const Call*>(e))) return kernelCall(static_cast<const Call*>(e));
    return ExprMutator::visit(e);
  }

 private:
  std::unordered_map<const Var*, const Expr*> inlined_;

  // Builds the primitive function for the group rooted at `root` and calls it.
  const Expr* kernelCall(const Call* root) {
    std::vector<const Var*> params;
    std::vector<const Expr*> args;
    std::unordered_map<const Expr*, const Var*> paramOf;
    std::unordered_map<const Expr*, const Expr*> built;
    Builder& b = builder();

    std::function<const Expr*(const Expr*)> inside = [&](const Expr* e) -> const Expr* {
      auto it = built.find(e);
      if (it != built.end()) return it->second;
      const Expr* r;
      const Call* member = g_.asCall(e);
      if (member && g_.rootOf(member) == root) {
        std::vector<const Expr*> newArgs;
        for (const Expr* a : member->args) newArgs.push_back(inside(a));
        Call* call = b.call(member->callee, newArgs, member->attrs, member->loc);
        call->type = member->type;
        r = call;
      } else if (e->kind == ExprKind::Constant && asTensor(e->type)) {
        r = e;
      } else if (e->kind == ExprKind::Tuple) {
        std::vector<const Expr*> fields;
        for (const Expr* f : static_cast<const Tuple*>(e)->fields) fields.push_back(inside(f));
        Tuple* t = b.tuple(fields, e->loc);
        t->type = e->type;
        r = t;
      } else if (auto* tt = asTuple(e->type); tt && e->kind == ExprKind::Var) {
        // A tuple held in a variable (`%t = (%x, %y); concatenate(%t)`): its
        // fields become the kernel's parameters, as TVM's FuseOps flattens
        // tuple parameters, so a kernel only ever takes tensors.
        const Expr* outside = mutate(e);
        std::vector<const Expr*> fields;
        for (size_t i = 0; i < tt->fields.size(); ++i) {
          Var* v = b.var("p" + std::to_string(params.size()), nullptr, e->loc);
          v->type = tt->fields[i];
          params.push_back(v);
          TupleGet* get = b.tupleGet(outside, static_cast<uint32_t>(i), e->loc);
          get->type = tt->fields[i];
          args.push_back(get);
          fields.push_back(v);
        }
        Tuple* t = b.tuple(fields, e->loc);
        t->type = e->type;
        r = t;
      } else {
        // An input from outside the kernel: a parameter of the primitive function.
        auto p = paramOf.find(e);
        if (p != paramOf.end()) return p->second;
        Var* v = b.var("p" + std::to_string(params.size()), nullptr, e->loc);
        v->type = e->type;
        params.push_back(v);
        args.push_back(mutate(e));
        paramOf.emplace(e, v);
        r = v;
      }
      built.emplace(e, r);
      return r;
    };
    const Expr* body = inside(root);
    Function* fn = b.function({}, params, nullptr, body, root->loc);
    fn->primitive = true;
    made_.insert(fn);
    std::vector<const Type*> ptypes;
    for (const Var* p : params) ptypes.push_back(p->type);
    fn->type = funcType(a_, ptypes, root->type);
    Call* call = b.call(fn, args, nullptr, root->loc);
    call->type = root->type;
    return call;
  }

  Grouping& g_;
  Arena& a_;
  const std::string& file_;
  std::unordered_set<const Function*> made_;
};

}  // namespace

std::unique_ptr<Module> fuseOps(const Module& m, const FuseOptions& opts) {
  auto out = std::make_unique<Module>(m.arenaPtr(), m.file());
  for (const auto& t : m.typeDefs()) out->addTypeDef(t.def, t.fromPrelude);
  for (const GlobalFunction& g : m.functions()) {
    Grouping grouping(opts);
    grouping.run(g.fn->body, opts.fuse);
    FuseRewriter rewriter(m.arena(), grouping, m.file());
    const Expr* body = rewriter.mutate(g.fn->body);
    if (opts.fuse && opts.mergeKernels) body = mergeKernelChains(m.arena(), body, rewriter.made());
    if (body == g.fn->body) {
      out->addFunction(g.var, g.fn, g.fromPrelude);
      continue;
    }
    Function* fn = Builder(m.arena()).function(g.fn->typeParams, g.fn->params, g.fn->resultAnnotation, body, g.fn->loc);
    fn->type = g.fn->type;
    fn->attrs = g.fn->attrs;
    out->addFunction(g.var, fn, g.fromPrelude);
  }
  return out;
}

std::vector<const Function*> primitiveFunctions(const Module& m) {
  std::vector<const Function*> out;
  std::unordered_set<const Expr*> seen;
  // The program's own functions, then the prelude functions they reach.
  std::vector<const GlobalFunction*> work;
  std::unordered_set<std::string_view> queued;
  for (const GlobalFunction& g : m.functions())
    if (!g.fromPrelude) {
      work.push_back(&g);
      queued.insert(g.var->name);
    }
  for (size_t w = 0; w < work.size(); ++w) {
    // Post-order in evaluation order: a kernel is listed after the kernels computing its inputs.
    std::vector<std::pair<const Expr*, bool>> stack{{work[w]->fn->body, false}};
    while (!stack.empty()) {
      auto [e, expanded] = stack.back();
      stack.pop_back();
      if (expanded) {
        if (isPrimitiveFunction(e)) out.push_back(static_cast<const Function*>(e));
        continue;
      }
      if (!seen.insert(e).second) continue;
      stack.push_back({e, true});
      // Children are pushed in reverse evaluation order. A call's callee (a kernel
      // among them) is pushed first, so it is listed after the kernels of its arguments.
      std::vector<const Expr*> children;
      if (e->kind == ExprKind::Call) {
        auto* c = static_cast<const Call*>(e);
        stack.push_back({c->callee, false});
        children.assign(c->args.begin(), c->args.end());
      } else {
        forEachChild(e, [&](const Expr* c) { children.push_back(c); });
      }
      for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back({*it, false});
      if (e->kind == ExprKind::GlobalVar) {
        std::string_view name = static_cast<const GlobalVar*>(e)->name;
        if (const GlobalFunction* f = m.findFunction(name); f && queued.insert(name).second) work.push_back(f);
      }
    }
  }
  return out;
}

}  // namespace kiln::compiler
