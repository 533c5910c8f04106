// Primitive IR function -> kernel_ir::FusedFunction.
#include "compiler/passes/to_fused_function.h"

#include <unordered_map>

#include "kiln/error.h"

namespace kiln::compiler {

using namespace kiln::ir;

namespace {

class Converter {
 public:
  Converter(const Function* fn, const std::string& name, const std::string& file) : fn_(fn), file_(file) {
    f_.name = name;
    // A region made for a library (partition/partition.h) keeps its library.
    const ops::AttrValue* lib = fn->attrs ? fn->attrs->find("Compiler") : nullptr;
    if (lib && lib->kind == ops::AttrValue::Kind::String) f_.library = lib->s;
  }

  kernel_ir::FusedFunction run() {
    for (const Var* p : fn_->params) {
      const TensorType* t = asTensor(p->type);
      if (!t) fail(p->loc, "kernel parameter %" + std::string(p->name) + " must be a tensor, not " + typeToString(p->type));
      values_[p] = static_cast<int32_t>(f_.params.size());
      f_.params.push_back(toDesc(t));
    }
    const Expr* body = fn_->body;
    while (body->kind == ExprKind::Let) {
      auto* l = static_cast<const Let*>(body);
      if (asTensor(l->value->type)) values_[l->var] = value(l->value);
      else bindings_[l->var] = l->value;  // e.g. a tuple, used through its fields
      body = l->body;
    }
    const Expr* root = resolve(body);
    if (root->kind == ExprKind::Tuple) {
      for (const Expr* e : static_cast<const Tuple*>(root)->fields) f_.outputs.push_back(value(e));
    } else if (root->kind == ExprKind::Call && asTuple(root->type)) {
      // A tuple-producing operator (split) at the root: every field is an output.
      auto* c = static_cast<const Call*>(root);
      for (size_t i = 0; i < asTuple(root->type)->fields.size(); ++i) f_.outputs.push_back(opNode(c, static_cast<int32_t>(i)));
    } else {
      f_.outputs.push_back(value(body));
    }
    f_.verify();
    return std::move(f_);
  }

 private:
  [[noreturn]] void fail(SourceLoc loc, const std::string& msg) const { throw Error(file_, loc, msg); }

  int32_t add(kernel_ir::FusedNode n) {
    f_.nodes.push_back(std::move(n));
    return static_cast<int32_t>(f_.params.size() + f_.nodes.size() - 1);
  }

  const Expr* resolve(const Expr* e) {
    while (e->kind == ExprKind::Var) {
      auto it = bindings_.find(static_cast<const Var*>(e));
      if (it == bindings_.end()) break;
      e = it->second;
    }
    return e;
  }

  int32_t value(const Expr* e) {
    auto it = values_.find(e);
    if (it != values_.end()) return it->second;
    int32_t v = build(resolve(e));
    values_[e] = v;
    return v;
  }

  int32_t build(const Expr* e) {
    switch (e->kind) {
      case ExprKind::Constant: {
        auto* c = static_cast<const Constant*>(e);
        return add(kernel_ir::FusedNode::constant(c->dtype, c->floatValue, c->intValue));
      }
      case ExprKind::Call: return opNode(static_cast<const Call*>(e), 0);
      case ExprKind::TupleGet: {
        auto* g = static_cast<const TupleGet*>(e);
        const Expr* t = resolve(g->tuple);
        if (t->kind == ExprKind::Call) return opNode(static_cast<const Call*>(t), static_cast<int32_t>(g->index));
        if (t->kind == ExprKind::Tuple) return value(static_cast<const Tuple*>(t)->fields[g->index]);
        break;
      }
      default: break;
    }
    fail(e->loc, "a kernel can only hold operator calls on tensors, not this expression");
  }

  int32_t opNode(const Call* c, int32_t field) {
    if (c->callee->kind != ExprKind::Op) fail(c->loc, "a kernel cannot call a function");
    kernel_ir::FusedNode n;
    n.op = static_cast<const OpRef*>(c->callee)->op;
    if (n.op->annotation) fail(c->loc, "'" + n.op->name + "' belongs outside kernels");
    for (const Expr* a : c->args) {
      const Expr* r = resolve(a);
      if (n.op->tupleInput && r->kind == ExprKind::Tuple) {
        for (const Expr* f : static_cast<const Tuple*>(r)->fields) n.inputs.push_back(value(f));
      } else {
        n.inputs.push_back(value(a));
      }
    }
    if (c->attrs) n.attrs = *c->attrs;
    n.field = field;
    const Type* t = c->type;
    if (auto* tt = asTuple(t)) t = tt->fields[static_cast<size_t>(field)];
    const TensorType* tensor = asTensor(t);
    if (!tensor) fail(c->loc, "a kernel's values must be tensors");
    n.type = toDesc(tensor);
    // The same split feeds several fields: one node per field, each computing its own part.
    return add(std::move(n));
  }

  const Function* fn_;
  const std::string& file_;
  kernel_ir::FusedFunction f_;
  std::unordered_map<const Expr*, int32_t> values_;
  std::unordered_map<const Var*, const Expr*> bindings_;
};

}  // namespace

kernel_ir::FusedFunction toFusedFunction(const Function* fn, const std::string& name, const std::string& file) {
  return Converter(fn, name, file).run();
}

}  // namespace kiln::compiler
