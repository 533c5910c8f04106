// Kernel merging: consecutive kernel bindings, each reading the ones before it, become one kernel (merge_kernels.h).
#include "compiler/passes/merge_kernels.h"

#include <unordered_map>
#include <vector>

#include "compiler/ir/mutator.h"
#include "compiler/ir/visit.h"

namespace kiln::compiler {

using namespace kiln::ir;

namespace {

// A chain joins at most this many kernels: enough for a recurrent cell's gates,
// few enough that one merged kernel's loop body stays small to compile.
constexpr size_t kMaxStages = 8;

const ops::OpDef* opOf(const Expr* e) {
  if (e->kind != ExprKind::Call) return nullptr;
  auto* c = static_cast<const Call*>(e);
  return c->callee->kind == ExprKind::Op ? static_cast<const OpRef*>(c->callee)->op : nullptr;
}

// Whether every operator of a kernel's body passes `ok`, the body being operator
// calls, tuples, fields, parameters and constants (as fusion builds them).
template <class Ok>
bool allOperators(const Function* fn, Ok&& ok) {
  std::vector<const Expr*> stack{fn->body};
  while (!stack.empty()) {
    const Expr* e = stack.back();
    stack.pop_back();
    switch (e->kind) {
      case ExprKind::Call: {
        const ops::OpDef* op = opOf(e);
        if (!op || op->annotation || !ok(*op)) return false;
        for (const Expr* a : static_cast<const Call*>(e)->args) stack.push_back(a);
        break;
      }
      case ExprKind::Tuple:
        for (const Expr* f : static_cast<const Tuple*>(e)->fields) stack.push_back(f);
        break;
      case ExprKind::TupleGet: stack.push_back(static_cast<const TupleGet*>(e)->tuple); break;
      case ExprKind::Var:
      case ExprKind::Constant: break;
      default: return false;
    }
  }
  return true;
}

bool isProduct(const ops::OpDef& op) {
  return op.name == "nn.dense" || op.name == "nn.matmul" || op.name == "nn.batch_matmul";
}

// A kernel a chain may start with: the generic lowering's element-wise,
// broadcast and injective operators around matrix products.
bool canStart(const Function* fn) {
  return allOperators(fn, [](const ops::OpDef& op) {
    if (op.pattern == ops::OpPattern::OutEWiseFusable) return isProduct(op);
    return op.pattern <= ops::OpPattern::Injective && op.compute && !op.dataDependent;
  });
}

// A kernel that may join a chain: element-wise and broadcast operators with one
// tensor result.
bool canJoin(const Function* fn) {
  if (!asTensor(fn->body->type)) return false;
  return allOperators(fn, [](const ops::OpDef& op) {
    return op.pattern <= ops::OpPattern::Broadcast && op.compute && !op.tupleInput && !op.tupleOutput;
  });
}

bool staticShape(const TensorType* t) {
  for (int64_t d : t->shape)
    if (d < 0) return false;
  return true;
}

// Whether a value of type `a` read by a kernel of result type `r` is read once
// per element: a tensor of the result's own static shape.
bool sameStaticShape(const Type* a, const Type* r) {
  const TensorType *x = asTensor(a), *y = asTensor(r);
  if (!x || !y || !staticShape(x) || !staticShape(y) || x->rank() != y->rank()) return false;
  for (size_t d = 0; d < x->rank(); ++d)
    if (x->shape[d] != y->shape[d]) return false;
  return true;
}

class ChainMerger : public ExprMutator {
 public:
  ChainMerger(Arena& arena, const Expr* body, const std::unordered_set<const Function*>& mergeable)
      : ExprMutator(arena), arena_(arena), mergeable_(mergeable) {
    findReaders(body);
  }

 protected:
  const Expr* visit(const Expr* e) override {
    if (auto it = replace_.find(e); it != replace_.end()) return it->second;
    if (e->kind == ExprKind::Let) return visitChain(static_cast<const Let*>(e));
    return ExprMutator::visit(e);
  }

 private:
  // Where a stage's parameter comes from: an expression outside the chain, or a
  // result of an earlier stage (field -1: the whole result).
  struct Source {
    const Expr* outside = nullptr;
    size_t stage = 0;
    int field = -1;
  };
  struct Stage {
    const Let* let;       // the binding as it was
    size_t at;            // its place in the let chain
    const Function* fn;   // the kernel its value calls
    std::vector<Source> sources;  // one per parameter of fn
  };
  struct Binding {
    const Var* var;
    const Expr* value;
    const Let* from;  // for the location and the binding style
  };

  // The expressions that read each variable directly (each once, however often
  // they read it): a chain result read by anything but a later stage's call,
  // or the field of it that call takes, is used after the chain.
  void findReaders(const Expr* root) {
    std::vector<const Expr*> stack{root};
    std::unordered_set<const Expr*> seen{root};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      forEachChild(e, [&](const Expr* c) {
        if (c->kind == ExprKind::TupleGet) ++fieldUses_[c];
        if (c->kind == ExprKind::Var) readers_[static_cast<const Var*>(c)].push_back(e);
        else if (seen.insert(c).second) stack.push_back(c);
      });
    }
  }

  // The mergeable kernel `value` calls, or null.
  const Function* kernelOf(const Expr* value) const {
    if (value->kind != ExprKind::Call) return nullptr;
    const Expr* callee = static_cast<const Call*>(value)->callee;
    if (!isPrimitiveFunction(callee)) return nullptr;
    auto* fn = static_cast<const Function*>(callee);
    return mergeable_.count(fn) ? fn : nullptr;
  }

  // Stage `s` when the kernel of `let` (its value `call`) can join
  // the chain `stages`.
  bool joins(const std::vector<Stage>& stages, const Let* let, size_t at, const Call* call, Stage& s) const {
    const Function* fn = kernelOf(call);
    if (!fn || stages.size() >= kMaxStages || !canJoin(fn) || fn->params.size() != call->args.size()) return false;
    auto stageOf = [&](const Expr* e) -> int {
      for (size_t i = 0; i < stages.size(); ++i)
        if (stages[i].let->var == e) return static_cast<int>(i);
      return -1;
    };
    s = Stage{let, at, fn, {}};
    bool readsChain = false;
    for (const Expr* a : call->args) {
      Source src{a};
      if (a->kind == ExprKind::Var) {
        if (int i = stageOf(a); i >= 0) src = Source{nullptr, static_cast<size_t>(i), -1};
      } else if (a->kind == ExprKind::TupleGet) {
        auto* g = static_cast<const TupleGet*>(a);
        if (g->tuple->kind != ExprKind::Var) return false;
        if (int i = stageOf(g->tuple); i >= 0) src = Source{nullptr, static_cast<size_t>(i), static_cast<int>(g->index)};
      } else if (a->kind != ExprKind::Constant) {
        return false;  // computed here: it would run before the merged call, maybe reading its results
      }
      if (!src.outside) {
        if (!sameStaticShape(a->type, call->type)) return false;
        readsChain = true;
      }
      s.sources.push_back(src);
    }
    return readsChain;
  }

  const Expr* visitChain(const Let* first) {
    std::vector<const Let*> lets;
    const Expr* e = first;
    while (e->kind == ExprKind::Let) {
      lets.push_back(static_cast<const Let*>(e));
      e = lets.back()->body;
    }
    // The chains, decided on the bindings as written (a joining kernel's
    // arguments are variables and constants, which rewriting leaves alone).
    std::vector<std::vector<Stage>> chains;
    std::vector<Stage> stages;
    std::vector<int> chainOf(lets.size(), -1);
    auto close = [&] {
      if (stages.size() > 1) chains.push_back(std::move(stages));
      stages.clear();
    };
    for (size_t i = 0; i < lets.size(); ++i) {
      const Expr* v = lets[i]->value;
      const Call* call = v->kind == ExprKind::Call ? static_cast<const Call*>(v) : nullptr;
      Stage next;
      if (call && !stages.empty() && joins(stages, lets[i], i, call, next)) {
        stages.push_back(std::move(next));
        continue;
      }
      close();
      const Function* fn = call ? kernelOf(call) : nullptr;
      if (fn && canStart(fn) && fn->params.size() == call->args.size()) {
        Stage s{lets[i], i, fn, {}};
        for (const Expr* a : call->args) s.sources.push_back(Source{a});
        stages.push_back(std::move(s));
      }
    }
    close();
    std::vector<Merged> merged;
    for (size_t c = 0; c < chains.size(); ++c) {
      merged.push_back(plan(chains[c]));
      for (const Stage& s : chains[c]) chainOf[s.at] = static_cast<int>(c);
    }

    // Then the rewrite, with the fields read after each chain redirected to
    // the merged kernel's results.
    std::vector<Binding> out;
    bool changed = !chains.empty();
    for (size_t i = 0; i < lets.size(); ++i) {
      int c = chainOf[i];
      if (c < 0) {
        out.push_back({lets[i]->var, mutate(lets[i]->value), lets[i]});
        changed |= out.back().value != lets[i]->value;
      } else if (chains[static_cast<size_t>(c)].back().let == lets[i]) {
        emit(chains[static_cast<size_t>(c)], merged[static_cast<size_t>(c)], out);
      }
    }
    const Expr* body = mutate(e);
    if (!changed && body == e) return first;  // a long chain with nothing to merge is not copied
    for (auto it = out.rbegin(); it != out.rend(); ++it) {
      Let* l = builder().let(it->var, it->value, body, it->from->graphStyle, it->from->loc);
      l->type = body->type;
      body = l;
    }
    return body;
  }

  // Stage j's result as read after the chain: not at all (no readers but the
  // calls of the stages after it and the fields of it those calls take), by
  // fields alone (every other reader takes a field), or whole.
  struct Reads {
    bool whole = false;
    std::vector<std::pair<uint32_t, const TupleGet*>> fields;  // field, the expression reading it
    bool any() const { return whole || !fields.empty(); }
  };
  Reads readsAfter(const std::vector<Stage>& stages, size_t j) const {
    Reads r;
    auto it = readers_.find(stages[j].let->var);
    if (it == readers_.end()) return r;
    bool tuple = asTuple(stages[j].fn->body->type) != nullptr;
    for (const Expr* reader : it->second) {
      // A later stage's argument, used nowhere else (a field expression may be
      // shared by several parents in a graph-style program).
      int inside = 0;
      for (size_t k = j + 1; k < stages.size(); ++k) {
        const Expr* call = stages[k].let->value;
        if (reader == call) inside = -1;
        for (const Expr* a : static_cast<const Call*>(call)->args)
          if (a == reader && inside >= 0) ++inside;
      }
      if (inside < 0) continue;
      if (inside > 0) {
        auto uses = fieldUses_.find(reader);
        if (uses == fieldUses_.end() || uses->second <= inside) continue;
      }
      if (tuple && reader->kind == ExprKind::TupleGet) {
        auto* g = static_cast<const TupleGet*>(reader);
        r.fields.emplace_back(g->index, g);
      } else {
        r.whole = true;
      }
    }
    return r;
  }

  // A merged kernel's results: each (stage, field or -1) read after the chain,
  // in order, and the variable that holds them all.
  struct Merged {
    std::vector<std::pair<size_t, int>> results;
    std::vector<Reads> reads;  // per stage
    const Var* var = nullptr;
  };

  // Which results the merged kernel returns, and where those read by field are
  // now found: the reading expressions become fields of the merged result.
  Merged plan(const std::vector<Stage>& stages) {
    Builder& b = builder();
    Merged m;
    std::vector<const Type*> types;
    for (size_t j = 0; j < stages.size(); ++j) {
      Reads r = readsAfter(stages, j);
      if (j + 1 == stages.size()) r.whole = true;
      const Type* t = stages[j].fn->body->type;
      const TupleType* tt = asTuple(t);
      if (r.whole && tt) {
        for (size_t f = 0; f < tt->fields.size(); ++f) {
          m.results.emplace_back(j, static_cast<int>(f));
          types.push_back(tt->fields[f]);
        }
      } else if (r.whole) {
        m.results.emplace_back(j, -1);
        types.push_back(t);
      } else {
        for (auto [f, g] : r.fields) {
          bool seen = false;
          for (auto [s, rf] : m.results) seen |= s == j && rf == static_cast<int>(f);
          if (seen) continue;
          m.results.emplace_back(j, static_cast<int>(f));
          types.push_back(tt->fields[f]);
        }
      }
      m.reads.push_back(std::move(r));
    }
    Var* v = b.var(std::string(stages.back().let->var->name) + "_merged", nullptr, stages.back().let->loc);
    v->type = tupleType(arena_, types);
    m.var = v;
    // A field read by itself after the chain is now the merged result's field.
    for (size_t j = 0; j < stages.size(); ++j) {
      if (m.reads[j].whole) continue;
      for (auto [f, g] : m.reads[j].fields) replace_[g] = fieldOf(v, resultIndex(m, j, static_cast<int>(f)), g->type, g->loc);
    }
    return m;
  }

  static size_t resultIndex(const Merged& m, size_t stage, int field) {
    for (size_t i = 0; i < m.results.size(); ++i)
      if (m.results[i].first == stage && m.results[i].second == field) return i;
    return m.results.size();
  }

  const Expr* fieldOf(const Expr* tuple, size_t i, const Type* type, SourceLoc loc) {
    TupleGet* g = builder().tupleGet(tuple, static_cast<uint32_t>(i), loc);
    g->type = type;
    return g;
  }

  // The merged kernel's binding, and one for each stage result read whole
  // after the chain.
  void emit(const std::vector<Stage>& stages, const Merged& m, std::vector<Binding>& out) {
    Builder& b = builder();
    const Let* last = stages.back().let;
    SourceLoc loc = last->loc;

    // Its parameters: the stages' outside arguments.
    std::vector<const Var*> params;
    std::vector<const Expr*> args;
    std::vector<const Type*> paramTypes;
    std::unordered_map<const Expr*, const Var*> paramOf;
    // Each stage's result inside the merged kernel.
    std::vector<const Var*> results;
    for (const Stage& s : stages) {
      for (const Source& src : s.sources)
        if (src.outside && !paramOf.count(src.outside)) {
          Var* p = b.var("p" + std::to_string(params.size()), nullptr, loc);
          p->type = src.outside->type;
          paramOf.emplace(src.outside, p);
          params.push_back(p);
          args.push_back(mutate(src.outside));
          paramTypes.push_back(p->type);
        }
      Var* r = b.var("r" + std::to_string(results.size()), nullptr, loc);
      r->type = s.fn->body->type;
      results.push_back(r);
    }

    std::vector<const Expr*> fields;
    for (auto [j, f] : m.results)
      fields.push_back(f < 0 ? static_cast<const Expr*>(results[j])
                             : fieldOf(results[j], static_cast<size_t>(f),
                                       asTuple(results[j]->type)->fields[static_cast<size_t>(f)], loc));
    Tuple* root = b.tuple(fields, loc);
    root->type = m.var->type;

    // The body, inside out: each stage binds its kernel's parameters to their
    // sources, then its result to the kernel's body.
    const Expr* inner = root;
    auto bind = [&](const Var* v, const Expr* value) {
      Let* l = b.let(v, value, inner, false, loc);
      l->type = inner->type;
      inner = l;
    };
    for (size_t j = stages.size(); j-- > 0;) {
      const Stage& s = stages[j];
      bind(results[j], s.fn->body);
      for (size_t k = s.fn->params.size(); k-- > 0;) {
        const Source& src = s.sources[k];
        const Expr* value = src.outside ? paramOf.at(src.outside)
                            : src.field < 0 ? static_cast<const Expr*>(results[src.stage])
                                            : fieldOf(results[src.stage], static_cast<size_t>(src.field),
                                                      s.fn->params[k]->type, loc);
        bind(s.fn->params[k], value);
      }
    }
    Function* fn = b.function({}, params, nullptr, inner, loc);
    fn->primitive = true;
    fn->type = funcType(arena_, paramTypes, m.var->type);
    Call* call = b.call(fn, args, nullptr, loc);
    call->type = m.var->type;
    out.push_back({m.var, call, last});

    for (size_t j = 0; j < stages.size(); ++j) {
      if (!m.reads[j].whole) continue;
      const Type* t = results[j]->type;
      const Expr* value;
      if (const TupleType* tt = asTuple(t)) {
        std::vector<const Expr*> parts;
        for (size_t f = 0; f < tt->fields.size(); ++f)
          parts.push_back(fieldOf(m.var, resultIndex(m, j, static_cast<int>(f)), tt->fields[f], loc));
        Tuple* tuple = b.tuple(parts, loc);
        tuple->type = t;
        value = tuple;
      } else {
        value = fieldOf(m.var, resultIndex(m, j, -1), t, loc);
      }
      out.push_back({stages[j].let->var, value, last});
    }
  }

  Arena& arena_;
  const std::unordered_set<const Function*>& mergeable_;
  std::unordered_map<const Var*, std::vector<const Expr*>> readers_;
  // How many times each field expression is an operand, all parents counted.
  std::unordered_map<const Expr*, int> fieldUses_;
  // Expressions that read a field of a chain result after the chain, and the
  // merged result's field that replaces each.
  std::unordered_map<const Expr*, const Expr*> replace_;
};

}  // namespace

const Expr* mergeKernelChains(Arena& arena, const Expr* body, const std::unordered_set<const Function*>& mergeable) {
  if (mergeable.empty()) return body;
  return ChainMerger(arena, body, mergeable).mutate(body);
}

}  // namespace kiln::compiler
