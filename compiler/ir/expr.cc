// Construction of expression and pattern nodes.
#include "compiler/ir/expr.h"

namespace kiln::ir {

namespace {
template <class T>
T* node(Arena& a, ExprKind k, SourceLoc loc) {
  T* n = a.make<T>();
  n->kind = k;
  n->loc = loc;
  return n;
}
template <class T>
T* pattern(Arena& a, PatternKind k, SourceLoc loc) {
  T* n = a.make<T>();
  n->kind = k;
  n->loc = loc;
  return n;
}
}  // namespace

Var* Builder::var(std::string_view name, const Type* annotation, SourceLoc loc) {
  Var* v = node<Var>(a_, ExprKind::Var, loc);
  v->name = a_.str(name);
  v->annotation = annotation;
  return v;
}

GlobalVar* Builder::globalVar(std::string_view name, SourceLoc loc) {
  GlobalVar* g = node<GlobalVar>(a_, ExprKind::GlobalVar, loc);
  g->name = a_.str(name);
  return g;
}

Constant* Builder::intConst(DType dtype, int64_t v, SourceLoc loc) {
  Constant* c = node<Constant>(a_, ExprKind::Constant, loc);
  c->dtype = dtype;
  c->intValue = v;
  c->floatValue = static_cast<double>(v);
  return c;
}

Constant* Builder::floatConst(DType dtype, double v, SourceLoc loc) {
  Constant* c = node<Constant>(a_, ExprKind::Constant, loc);
  c->dtype = dtype;
  c->floatValue = v;
  return c;
}

OpRef* Builder::op(const ops::OpDef* op, SourceLoc loc) {
  OpRef* o = node<OpRef>(a_, ExprKind::Op, loc);
  o->op = op;
  return o;
}

CtorRef* Builder::ctor(const Constructor* c, SourceLoc loc) {
  CtorRef* r = node<CtorRef>(a_, ExprKind::Ctor, loc);
  r->ctor = c;
  return r;
}

Call* Builder::call(const Expr* callee, std::span<const Expr* const> args, const ops::AttrMap* attrs,
                    SourceLoc loc) {
  Call* c = node<Call>(a_, ExprKind::Call, loc);
  c->callee = callee;
  c->args = a_.copy(args);
  c->attrs = attrs;
  return c;
}

Let* Builder::let(const Var* v, const Expr* value, const Expr* body, bool graphStyle, SourceLoc loc) {
  Let* l = node<Let>(a_, ExprKind::Let, loc);
  l->var = v;
  l->value = value;
  l->body = body;
  l->graphStyle = graphStyle;
  return l;
}

If* Builder::ifElse(const Expr* c, const Expr* t, const Expr* e, SourceLoc loc) {
  If* i = node<If>(a_, ExprKind::If, loc);
  i->cond = c;
  i->thenBranch = t;
  i->elseBranch = e;
  return i;
}

Match* Builder::match(const Expr* s, std::span<const Clause> clauses, bool complete, SourceLoc loc) {
  Match* m = node<Match>(a_, ExprKind::Match, loc);
  m->scrutinee = s;
  m->clauses = a_.copy(clauses);
  m->complete = complete;
  return m;
}

Function* Builder::function(std::span<const TypeParam* const> typeParams, std::span<const Var* const> params,
                            const Type* result, const Expr* body, SourceLoc loc) {
  Function* f = node<Function>(a_, ExprKind::Function, loc);
  f->typeParams = a_.copy(typeParams);
  f->params = a_.copy(params);
  f->resultAnnotation = result;
  f->body = body;
  return f;
}

Tuple* Builder::tuple(std::span<const Expr* const> fields, SourceLoc loc) {
  Tuple* t = node<Tuple>(a_, ExprKind::Tuple, loc);
  t->fields = a_.copy(fields);
  return t;
}

TupleGet* Builder::tupleGet(const Expr* t, uint32_t index, SourceLoc loc) {
  TupleGet* g = node<TupleGet>(a_, ExprKind::TupleGet, loc);
  g->tuple = t;
  g->index = index;
  return g;
}

RefOp* Builder::refOp(RefOpKind op, std::span<const Expr* const> args, SourceLoc loc) {
  RefOp* r = node<RefOp>(a_, ExprKind::RefOp, loc);
  r->op = op;
  r->args = a_.copy(args);
  return r;
}

Pattern* Builder::wildcard(SourceLoc loc) { return pattern<Pattern>(a_, PatternKind::Wildcard, loc); }

PatternVar* Builder::patternVar(const Var* v, SourceLoc loc) {
  PatternVar* p = pattern<PatternVar>(a_, PatternKind::Var, loc);
  p->var = v;
  return p;
}

PatternCtor* Builder::patternCtor(const Constructor* c, std::span<const Pattern* const> args, SourceLoc loc) {
  PatternCtor* p = pattern<PatternCtor>(a_, PatternKind::Ctor, loc);
  p->ctor = c;
  p->args = a_.copy(args);
  return p;
}

PatternTuple* Builder::patternTuple(std::span<const Pattern* const> fields, SourceLoc loc) {
  PatternTuple* p = pattern<PatternTuple>(a_, PatternKind::Tuple, loc);
  p->fields = a_.copy(fields);
  return p;
}

}  // namespace kiln::ir
