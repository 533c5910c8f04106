// The Relay text printer. Let chains print with a loop; other nesting recurses
// (bounded by the parser's nesting limit and run on the front end's large stack).
#include "compiler/ir/printer.h"

#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

namespace kiln::ir {

namespace {
// The shortest %g text that reads back as the same float32.
std::string shortestFloat(double v) {
  char buf[64];
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (static_cast<float>(std::strtod(buf, nullptr)) == static_cast<float>(v)) break;
  }
  return buf;
}
}  // namespace

std::string literalToString(const Constant* c) {
  char buf[64];
  switch (c->dtype) {
    case DType::Bool: return c->intValue ? "True" : "False";
    case DType::Int32: return std::to_string(c->intValue);
    case DType::Int8: return std::to_string(c->intValue) + "i8";
    case DType::Int16: return std::to_string(c->intValue) + "i16";
    case DType::Int64: return std::to_string(c->intValue) + "i64";
    case DType::UInt8: return std::to_string(c->intValue) + "u8";
    case DType::UInt16: return std::to_string(c->intValue) + "u16";
    case DType::Float32: return shortestFloat(c->floatValue) + "f";
    case DType::Float16: return shortestFloat(c->floatValue) + "f16";
    case DType::Float64: std::snprintf(buf, sizeof buf, "%.17g", c->floatValue); return std::string(buf) + "f64";
  }
  return "";
}

namespace {

bool isNumeric(std::string_view s) {
  if (s.empty()) return false;
  for (char ch : s)
    if (ch < '0' || ch > '9') return false;
  return true;
}

class Printer {
 public:
  explicit Printer(const PrintOptions& o) : opts_(o) {}

  std::string module(const Module& m) {
    out_ += "#[version = \"0.0.5\"]\n";
    for (const auto& t : m.typeDefs()) {
      if (t.fromPrelude && !opts_.includePrelude) continue;
      typeDef(t.def);
    }
    for (const auto& f : m.functions()) {
      if (f.fromPrelude && !opts_.includePrelude) continue;
      names_.clear();
      used_.clear();
      out_ += "\n";
      out_ += "def @";
      out_ += f.var->name;
      function(f.fn);
      out_ += "\n";
    }
    return std::move(out_);
  }

  std::string single(const Expr* e) {
    expr(e);
    return std::move(out_);
  }

 private:
  void typeDef(const TypeDef* d) {
    out_ += d->external ? "\nextern type " : "\ntype ";
    out_ += d->name;
    typeParams(d->params);
    if (d->external) {
      out_ += "\n";
      return;
    }
    out_ += " {\n";
    for (const Constructor* c : d->ctors) {
      out_ += "  ";
      out_ += c->name;
      if (!c->fields.empty()) {
        out_ += "(";
        for (size_t i = 0; i < c->fields.size(); ++i) out_ += (i ? ", " : "") + typeToString(c->fields[i]);
        out_ += ")";
      }
      out_ += ",\n";
    }
    out_ += "}\n";
  }

  void typeParams(std::span<const TypeParam* const> tps) {
    if (tps.empty()) return;
    out_ += "[";
    for (size_t i = 0; i < tps.size(); ++i) {
      if (i) out_ += ", ";
      out_ += tps[i]->name;
    }
    out_ += "]";
  }

  void newline() {
    out_ += '\n';
    out_.append(static_cast<size_t>(indent_) * 2, ' ');
  }

  const std::string& name(const Var* v) {
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    std::string n(v->name);
    for (int k = 1; used_.count(n); ++k) n = std::string(v->name) + "_" + std::to_string(k);
    used_.insert(n);
    return names_.emplace(v, n).first->second;
  }

  const Type* typeOf(const Var* v) const {
    if (v->annotation) return v->annotation;
    return opts_.showTypes ? v->type : nullptr;
  }

  void binder(const Var* v) {
    out_ += "%";
    out_ += name(v);
    if (const Type* t = typeOf(v)) out_ += ": " + typeToString(t);
  }

  // `(params) -> ret { body }` after `def @f` or `fn`.
  // `, key=value` for each attribute of a call or a function, after its operands
  // or parameters (`first`: there were none, so no leading comma).
  void attributes(const ops::AttrMap* attrs, bool first) {
    if (!attrs) return;
    for (const auto& [k, v] : attrs->items()) {
      out_ += first ? "" : ", ";
      first = false;
      out_ += k + "=" + v.toString();
    }
  }

  void function(const Function* f) {
    typeParams(f->typeParams);
    out_ += "(";
    for (size_t i = 0; i < f->params.size(); ++i) {
      if (i) out_ += ", ";
      binder(f->params[i]);
      if (opts_.note) {
        std::string n = opts_.note(f->params[i]);
        if (!n.empty()) out_ += " /* " + n + " */";
      }
    }
    attributes(f->attrs, f->params.empty());
    out_ += ")";
    const Type* ret = f->resultAnnotation;
    if (!ret && opts_.showTypes && f->type) ret = asFunc(f->type) ? asFunc(f->type)->result : nullptr;
    if (ret) out_ += " -> " + typeToString(ret);
    out_ += " ";
    block(f->body);
  }

  void block(const Expr* e) {
    out_ += "{";
    ++indent_;
    newline();
    sequence(e);
    --indent_;
    newline();
    out_ += "}";
  }

  // A let chain and its final expression, one binding per line.
  void sequence(const Expr* e) {
    while (e->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(e);
      const std::string& n = name(l->var);
      bool graph = l->graphStyle && isNumeric(n) && !l->var->annotation;
      if (graph) {
        out_ += "%" + n + " = ";
        expr(l->value);
        if (opts_.showTypes && l->var->type) out_ += " /* ty=" + typeToString(l->var->type) + " */";
      } else {
        out_ += "let ";
        binder(l->var);
        out_ += " = ";
        expr(l->value);
      }
      out_ += ";";
      noteOn(l->var);
      newline();
      e = l->body;
    }
    expr(e);
    noteOn(e);
  }

  void noteOn(const Expr* e) {
    if (!opts_.note) return;
    std::string n = opts_.note(e);
    if (!n.empty()) out_ += "  // " + n;
  }

  void args(std::span<const Expr* const> items) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += ", ";
      expr(items[i]);
    }
  }

  static bool atomic(const Expr* e) {
    switch (e->kind) {
      case ExprKind::Var:
      case ExprKind::GlobalVar:
      case ExprKind::Ctor:
      case ExprKind::Op:
      case ExprKind::Call:
      case ExprKind::Tuple:
      case ExprKind::TupleGet:
      case ExprKind::RefOp: return true;
      default: return false;
    }
  }

  void expr(const Expr* e) {
    switch (e->kind) {
      case ExprKind::Var: out_ += "%" + name(static_cast<const Var*>(e)); return;
      case ExprKind::GlobalVar: out_ += "@"; out_ += static_cast<const GlobalVar*>(e)->name; return;
      case ExprKind::Constant: out_ += literalToString(static_cast<const Constant*>(e)); return;
      case ExprKind::Op: out_ += static_cast<const OpRef*>(e)->op->name; return;
      case ExprKind::Ctor: out_ += static_cast<const CtorRef*>(e)->ctor->name; return;
      case ExprKind::Call: {
        auto* c = static_cast<const Call*>(e);
        if (atomic(c->callee) && c->callee->kind != ExprKind::Tuple) {
          expr(c->callee);
        } else {
          out_ += "(";
          expr(c->callee);
          out_ += ")";
        }
        out_ += "(";
        args(c->args);
        attributes(c->attrs, c->args.empty());
        out_ += ")";
        if (opts_.callNote) {
          std::string n = opts_.callNote(e);
          if (!n.empty()) out_ += " /* " + n + " */";
        }
        return;
      }
      case ExprKind::Let:
        out_ += "(";
        ++indent_;
        newline();
        sequence(e);
        --indent_;
        newline();
        out_ += ")";
        return;
      case ExprKind::If: {
        auto* i = static_cast<const If*>(e);
        out_ += "if (";
        expr(i->cond);
        out_ += ") ";
        block(i->thenBranch);
        out_ += " else ";
        block(i->elseBranch);
        return;
      }
      case ExprKind::Match: {
        auto* m = static_cast<const Match*>(e);
        out_ += m->complete ? "match (" : "match? (";
        expr(m->scrutinee);
        out_ += ") {";
        ++indent_;
        for (const Clause& c : m->clauses) {
          newline();
          pattern(c.pattern);
          out_ += " => ";
          if (atomic(c.body) || c.body->kind == ExprKind::Constant) expr(c.body);
          else block(c.body);
          out_ += ",";
        }
        --indent_;
        newline();
        out_ += "}";
        return;
      }
      case ExprKind::Function:
        // Primitive (fused) functions are marked as TVM's printer marks them.
        out_ += static_cast<const Function*>(e)->primitive ? "/* primitive */ fn "
                : static_cast<const Function*>(e)->closure ? "/* closure */ fn " : "fn ";
        function(static_cast<const Function*>(e));
        return;
      case ExprKind::Tuple: {
        auto* t = static_cast<const Tuple*>(e);
        out_ += "(";
        args(t->fields);
        if (t->fields.size() == 1) out_ += ",";
        out_ += ")";
        return;
      }
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        if (atomic(g->tuple)) {
          expr(g->tuple);
        } else {
          out_ += "(";
          expr(g->tuple);
          out_ += ")";
        }
        out_ += "." + std::to_string(g->index);
        return;
      }
      case ExprKind::RefOp: {
        auto* r = static_cast<const RefOp*>(e);
        out_ += r->op == RefOpKind::Create ? "ref(" : r->op == RefOpKind::Read ? "ref_read(" : "ref_write(";
        args(r->args);
        out_ += ")";
        return;
      }
    }
  }

  void pattern(const Pattern* p) {
    switch (p->kind) {
      case PatternKind::Wildcard: out_ += "_"; return;
      case PatternKind::Var: binder(static_cast<const PatternVar*>(p)->var); return;
      case PatternKind::Ctor: {
        auto* c = static_cast<const PatternCtor*>(p);
        out_ += c->ctor->name;
        if (!c->args.empty()) {
          out_ += "(";
          for (size_t i = 0; i < c->args.size(); ++i) {
            if (i) out_ += ", ";
            pattern(c->args[i]);
          }
          out_ += ")";
        }
        return;
      }
      case PatternKind::Tuple: {
        auto* t = static_cast<const PatternTuple*>(p);
        out_ += "(";
        for (size_t i = 0; i < t->fields.size(); ++i) {
          if (i) out_ += ", ";
          pattern(t->fields[i]);
        }
        out_ += ")";
        return;
      }
    }
  }

  const PrintOptions& opts_;
  std::string out_;
  int indent_ = 0;
  std::unordered_map<const Var*, std::string> names_;
  std::unordered_set<std::string> used_;
};

}  // namespace

std::string printModule(const Module& m, const PrintOptions& opts) { return Printer(opts).module(m); }
std::string printExpr(const Expr* e, const PrintOptions& opts) { return Printer(opts).single(e); }

}  // namespace kiln::ir
