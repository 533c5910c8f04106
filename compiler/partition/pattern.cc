// Pattern nodes and the matcher.
#include "compiler/partition/pattern.h"

#include <algorithm>
#include <unordered_set>

#include "kiln/error.h"
#include "ops/registry.h"

namespace kiln::partition {

using namespace ir;

PatternNode* PatternArena::make(PatKind k) {
  nodes_.emplace_back();
  nodes_.back().kind = k;
  return &nodes_.back();
}

const PatternNode* PatternArena::wildcard() { return make(PatKind::Wildcard); }

const PatternNode* PatternArena::op(std::string name) {
  if (!ops::findOp(name)) throw Error("pattern: there is no operator '" + name + "'");
  PatternNode* n = make(PatKind::Op);
  n->name = std::move(name);
  return n;
}

const PatternNode* PatternArena::anyCallee() { return make(PatKind::AnyCallee); }

const PatternNode* PatternArena::global(std::string name) {
  PatternNode* n = make(PatKind::Global);
  n->name = std::move(name);
  return n;
}

const PatternNode* PatternArena::call(const PatternNode* callee, std::vector<const PatternNode*> args, bool restArgs) {
  PatternNode* n = make(PatKind::Call);
  n->children.push_back(callee);
  n->children.insert(n->children.end(), args.begin(), args.end());
  n->restArgs = restArgs;
  return n;
}

const PatternNode* PatternArena::opCall(std::string name, std::vector<const PatternNode*> args) {
  return call(op(std::move(name)), std::move(args));
}

const PatternNode* PatternArena::alt(const PatternNode* a, const PatternNode* b) {
  PatternNode* n = make(PatKind::Alt);
  n->children = {a, b};
  return n;
}

const PatternNode* PatternArena::optional(const PatternNode* x,
                                          const std::function<const PatternNode*(const PatternNode*)>& wrap) {
  return alt(wrap(x), x);
}

const PatternNode* PatternArena::tuple(std::vector<const PatternNode*> fields) {
  PatternNode* n = make(PatKind::Tuple);
  n->children = std::move(fields);
  return n;
}

const PatternNode* PatternArena::tupleGet(const PatternNode* t, int64_t index) {
  PatternNode* n = make(PatKind::TupleGet);
  n->children = {t};
  n->index = index;
  return n;
}

const PatternNode* PatternArena::constant() { return make(PatKind::Constant); }

const PatternNode* PatternArena::hasAttrs(const PatternNode* inner, ops::AttrMap attrs) {
  PatternNode* n = make(PatKind::Attrs);
  n->children = {inner};
  n->attrs = std::move(attrs);
  return n;
}

const PatternNode* PatternArena::hasType(const PatternNode* inner, std::optional<DType> dtype, std::vector<int64_t> dims,
                                         bool exact) {
  PatternNode* n = make(PatKind::Type);
  n->children = {inner};
  n->dtype = dtype;
  n->dims = std::move(dims);
  n->rankKnown = true;
  n->exact = exact;
  return n;
}

const PatternNode* PatternArena::hasDType(const PatternNode* inner, DType dtype) {
  PatternNode* n = make(PatKind::Type);
  n->children = {inner};
  n->dtype = dtype;
  return n;
}

const PatternNode* PatternArena::check(const PatternNode* inner, PatternCheck fn) {
  PatternNode* n = make(PatKind::Check);
  n->children = {inner};
  n->check = std::move(fn);
  return n;
}

void PatternTable::append(const PatternTable& other) {
  composites.insert(composites.end(), other.composites.begin(), other.composites.end());
  supports.insert(supports.end(), other.supports.begin(), other.supports.end());
  appended.push_back(other.arena);
  appended.insert(appended.end(), other.appended.begin(), other.appended.end());
}

std::vector<std::string> PatternTable::libraries() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& lib) {
    if (std::find(out.begin(), out.end(), lib) == out.end()) out.push_back(lib);
  };
  for (const SupportRule& r : supports) add(r.library);
  for (const CompositePattern& c : composites) add(c.name.substr(0, c.name.find('.')));
  return out;
}

namespace {

const ops::AttrMap* attrsOf(const Expr* e) {
  if (e->kind == ExprKind::Call) return static_cast<const Call*>(e)->attrs;
  if (e->kind == ExprKind::Function) return static_cast<const Function*>(e)->attrs;
  return nullptr;
}

bool typeMatches(const PatternNode* p, const Type* t) {
  const TensorType* tt = asTensor(t);
  if (!tt) return false;
  if (p->dtype && tt->dtype != *p->dtype) return false;
  if (!p->rankKnown) return true;
  if (tt->rank() != p->dims.size()) return false;
  for (size_t i = 0; i < p->dims.size(); ++i) {
    int64_t want = p->dims[i], have = tt->shape[i];
    if (want == kAnyDim ? p->exact && have != kAnyDim : have != want) return false;
  }
  return true;
}

class Matcher {
 public:
  Matcher(const VarResolver& resolve, const std::function<bool(const Expr*)>& interiorOk, PatternMatch& out)
      : resolve_(resolve), interiorOk_(interiorOk), out_(out) {}

  bool match(const PatternNode* p, const Expr* e, bool isRoot) {
    auto it = out_.bound.find(p);
    if (it != out_.bound.end()) return it->second == e || it->second == look(e);
    switch (p->kind) {
      case PatKind::Wildcard:
        if (std::find(out_.inputs.begin(), out_.inputs.end(), e) == out_.inputs.end()) out_.inputs.push_back(e);
        return bind(p, e);
      case PatKind::Op:
        return e->kind == ExprKind::Op && static_cast<const OpRef*>(e)->op->name == p->name && bind(p, e);
      case PatKind::AnyCallee:
        if (e->kind == ExprKind::Op || e->kind == ExprKind::Ctor || isPrimitive(e)) return false;
        // A callee computed by the program (a variable, a closure) is one of the group's inputs.
        if (e->kind != ExprKind::GlobalVar && std::find(out_.inputs.begin(), out_.inputs.end(), e) == out_.inputs.end())
          out_.inputs.push_back(e);
        return bind(p, e);
      case PatKind::Global:
        return e->kind == ExprKind::GlobalVar && static_cast<const GlobalVar*>(e)->name == p->name && bind(p, e);
      case PatKind::Constant: return e->kind == ExprKind::Constant && bind(p, e);
      case PatKind::Alt: {
        Saved s = save();
        if (match(p->children[0], e, isRoot)) return bind(p, out_.bound[p->children[0]]);
        restore(s);
        return match(p->children[1], e, isRoot) && bind(p, out_.bound[p->children[1]]);
      }
      case PatKind::Attrs: {
        if (!match(p->children[0], e, isRoot)) return false;
        const Expr* x = out_.bound[p->children[0]];
        const ops::AttrMap* have = attrsOf(x);
        for (const auto& [k, v] : p->attrs.items()) {
          const ops::AttrValue* h = have ? have->find(k) : nullptr;
          if (!h || !(*h == v)) return false;
        }
        return bind(p, x);
      }
      case PatKind::Type: {
        if (!match(p->children[0], e, isRoot)) return false;
        const Expr* x = out_.bound[p->children[0]];
        return typeMatches(p, x->type) && bind(p, x);
      }
      case PatKind::Check: {
        if (!match(p->children[0], e, isRoot)) return false;
        const Expr* x = out_.bound[p->children[0]];
        return p->check(x) && bind(p, x);
      }
      case PatKind::Call:
      case PatKind::Tuple:
      case PatKind::TupleGet: return structure(p, e, isRoot);
    }
    return false;
  }

 private:
  struct Saved {
    size_t inputs, interior, absorbed;
    std::unordered_map<const PatternNode*, const Expr*> bound;
  };
  Saved save() const { return {out_.inputs.size(), out_.interior.size(), out_.absorbed.size(), out_.bound}; }
  void restore(Saved& s) {
    out_.inputs.resize(s.inputs);
    out_.interior.resize(s.interior);
    out_.absorbed.resize(s.absorbed);
    out_.bound = std::move(s.bound);
  }

  static bool commutative(const Expr* callee) {
    if (callee->kind != ExprKind::Op) return false;
    const std::string& n = static_cast<const OpRef*>(callee)->op->name;
    return n == "add" || n == "multiply" || n == "maximum" || n == "minimum" || n == "logical_and" || n == "logical_or";
  }

  static bool isPrimitive(const Expr* e) {
    return e->kind == ExprKind::Function && static_cast<const Function*>(e)->primitive;
  }

  bool bind(const PatternNode* p, const Expr* e) {
    out_.bound[p] = e;
    return true;
  }

  // The value behind a variable the caller lets us look through.
  const Expr* look(const Expr* e) const {
    if (e->kind != ExprKind::Var || !resolve_) return e;
    const Expr* v = resolve_(static_cast<const Var*>(e));
    return v ? v : e;
  }

  // Call, Tuple and TupleGet: nodes that become part of the group.
  bool structure(const PatternNode* p, const Expr* e, bool isRoot) {
    const Expr* x = look(e);
    bool throughVar = x != e;
    if (!isRoot && !interiorOk_(x)) return false;
    switch (p->kind) {
      case PatKind::Call: {
        if (x->kind != ExprKind::Call) return false;
        auto* c = static_cast<const Call*>(x);
        size_t want = p->children.size() - 1;
        if (p->restArgs ? c->args.size() < want : c->args.size() != want) return false;
        if (!match(p->children[0], c->callee, false)) return false;
        // A commutative operator's two operands match in either order (as TVM's matcher does).
        if (want == 2 && !p->restArgs && c->args.size() == 2 && commutative(c->callee)) {
          Saved s = save();
          if (match(p->children[1], c->args[0], false) && match(p->children[2], c->args[1], false)) break;
          restore(s);
          if (match(p->children[1], c->args[1], false) && match(p->children[2], c->args[0], false)) break;
          return false;
        }
        for (size_t i = 0; i < c->args.size(); ++i) {
          if (i < want) {
            if (!match(p->children[i + 1], c->args[i], false)) return false;
          } else if (std::find(out_.inputs.begin(), out_.inputs.end(), c->args[i]) == out_.inputs.end()) {
            out_.inputs.push_back(c->args[i]);
          }
        }
        break;
      }
      case PatKind::Tuple: {
        if (x->kind != ExprKind::Tuple) return false;
        auto* t = static_cast<const Tuple*>(x);
        if (t->fields.size() != p->children.size()) return false;
        for (size_t i = 0; i < t->fields.size(); ++i)
          if (!match(p->children[i], t->fields[i], false)) return false;
        break;
      }
      default: {
        if (x->kind != ExprKind::TupleGet) return false;
        auto* g = static_cast<const TupleGet*>(x);
        if (p->index >= 0 && g->index != static_cast<uint64_t>(p->index)) return false;
        if (!match(p->children[0], g->tuple, false)) return false;
        break;
      }
    }
    if (throughVar) out_.absorbed.push_back(static_cast<const Var*>(e));
    out_.interior.push_back(x);
    return bind(p, x);
  }

  const VarResolver& resolve_;
  const std::function<bool(const Expr*)>& interiorOk_;
  PatternMatch& out_;
};

}  // namespace

bool matchPattern(const PatternNode* p, const Expr* e, const VarResolver& resolve,
                  const std::function<bool(const Expr*)>& interiorOk, PatternMatch& out) {
  out = PatternMatch{};
  out.root = e;
  Matcher m(resolve, interiorOk, out);
  if (!m.match(p, e, true)) {
    out = PatternMatch{};
    return false;
  }
  // Inputs in the order the program evaluates them (operands matched in swapped
  // order were found the other way round): left to right through the group.
  std::unordered_set<const Expr*> isInput(out.inputs.begin(), out.inputs.end()), interior(out.interior.begin(), out.interior.end());
  std::unordered_map<const Var*, const Expr*> through;
  for (const Var* v : out.absorbed) through[v] = resolve(v);
  std::vector<const Expr*> ordered;
  std::function<void(const Expr*)> walk = [&](const Expr* x) {
    if (isInput.count(x)) {
      if (std::find(ordered.begin(), ordered.end(), x) == ordered.end()) ordered.push_back(x);
      return;
    }
    if (x->kind == ExprKind::Var && through.count(static_cast<const Var*>(x))) x = through[static_cast<const Var*>(x)];
    if (!interior.count(x)) return;  // a literal, an operator, a global
    if (x->kind == ExprKind::Call) {
      walk(static_cast<const Call*>(x)->callee);
      for (const Expr* a : static_cast<const Call*>(x)->args) walk(a);
    } else if (x->kind == ExprKind::Tuple) {
      for (const Expr* f : static_cast<const Tuple*>(x)->fields) walk(f);
    } else if (x->kind == ExprKind::TupleGet) {
      walk(static_cast<const TupleGet*>(x)->tuple);
    }
  };
  walk(out.root);
  if (ordered.size() == out.inputs.size()) out.inputs = std::move(ordered);
  return true;
}

std::string partitionedFromPattern(const PatternMatch& m) {
  std::string s;
  for (const Expr* e : m.interior) {
    if (e->kind == ExprKind::Call) {
      const Expr* callee = static_cast<const Call*>(e)->callee;
      if (callee->kind == ExprKind::Op) s += static_cast<const OpRef*>(callee)->op->name;
      else if (callee->kind == ExprKind::GlobalVar) s += std::string(static_cast<const GlobalVar*>(callee)->name);
      else s += "call";
    } else {
      s += e->kind == ExprKind::Tuple ? "Tuple" : "TupleGetItem";
    }
    s += "_";
  }
  return s;
}

}  // namespace kiln::partition
