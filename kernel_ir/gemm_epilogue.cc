// The column-group test for a loop after a GEMM (kernel_ir/gemm_epilogue.h).
#include "kernel_ir/gemm_epilogue.h"

#include <unordered_set>

namespace kiln::loop {

namespace {

// An index as coef * v + offset in the loop variable v, over constants only.
struct Linear {
  int64_t coef = 0, offset = 0;
};

bool closedConstant(const LoopKernel& k, ExprId e) {
  const ExprNode& n = k.expr(e);
  switch (n.kind) {
    case ExprKind::IntConst: return true;
    case ExprKind::Unary:
    case ExprKind::Cast: return closedConstant(k, n.a);
    case ExprKind::Binary: return closedConstant(k, n.a) && closedConstant(k, n.b);
    case ExprKind::Select: return closedConstant(k, n.a) && closedConstant(k, n.b) && closedConstant(k, n.c);
    default: return false;  // Dim, Var, Load, Reduce, floats
  }
}

std::optional<Linear> linearIn(const LoopKernel& k, ExprId e, int32_t var) {
  const ExprNode& n = k.expr(e);
  if (n.type != DType::Int64) return std::nullopt;
  if (closedConstant(k, e)) {
    std::optional<int64_t> v = evalOnHost(k, e, nullptr, {});
    if (!v) return std::nullopt;
    return Linear{0, *v};
  }
  if (n.kind == ExprKind::Var) return n.a == var ? std::optional<Linear>(Linear{1, 0}) : std::nullopt;
  if (n.kind != ExprKind::Binary) return std::nullopt;
  auto a = linearIn(k, n.a, var);
  auto b = linearIn(k, n.b, var);
  if (!a || !b) return std::nullopt;
  Linear r;
  bool overflow = false;
  switch (static_cast<BinaryOp>(n.op)) {
    case BinaryOp::Add:
      overflow = __builtin_add_overflow(a->coef, b->coef, &r.coef) ||
                 __builtin_add_overflow(a->offset, b->offset, &r.offset);
      break;
    case BinaryOp::Sub:
      overflow = __builtin_sub_overflow(a->coef, b->coef, &r.coef) ||
                 __builtin_sub_overflow(a->offset, b->offset, &r.offset);
      break;
    case BinaryOp::Mul: {
      if (a->coef != 0 && b->coef != 0) return std::nullopt;
      const Linear& scaled = a->coef != 0 ? *a : *b;
      int64_t factor = a->coef != 0 ? b->offset : a->offset;
      overflow = __builtin_mul_overflow(scaled.coef, factor, &r.coef) ||
                 __builtin_mul_overflow(scaled.offset, factor, &r.offset);
      break;
    }
    default: return std::nullopt;
  }
  if (overflow) return std::nullopt;
  return r;
}

// Walks the loop's statements and expressions: every read of C must be at
// c0 + v + g * columns with 0 <= g < groups; nothing may write C.
class ColumnGroupCheck {
 public:
  ColumnGroupCheck(const LoopKernel& k, int32_t c, int64_t c0, int32_t var, int64_t columns, int64_t groups)
      : k_(k), c_(c), c0_(c0), var_(var), columns_(columns), groups_(groups) {}

  bool stmt(StmtId id) {
    const StmtNode& s = k_.stmt(id);
    switch (s.kind) {
      case StmtKind::Store: return s.buffer != c_ && expr(s.index) && expr(s.value);
      case StmtKind::For: return expr(s.extent) && stmts(s.body);
      case StmtKind::Block: return stmts(s.body);
      case StmtKind::If: return expr(s.value) && stmts(s.body) && stmts(s.orElse);
      case StmtKind::Gemm:
      case StmtKind::Conv2d: return false;
    }
    return false;
  }
  bool stmts(const std::vector<StmtId>& ids) {
    for (StmtId id : ids)
      if (!stmt(id)) return false;
    return true;
  }

 private:
  bool expr(ExprId e) {
    if (!seen_.insert(e).second) return true;  // expressions are a DAG: each checked once
    const ExprNode& n = k_.expr(e);
    switch (n.kind) {
      case ExprKind::Load: return n.a == c_ ? groupRead(n.b) : expr(n.b);
      case ExprKind::Unary:
      case ExprKind::Cast: return expr(n.a);
      case ExprKind::Binary: return expr(n.a) && expr(n.b);
      case ExprKind::Select: return expr(n.a) && expr(n.b) && expr(n.c);
      case ExprKind::Reduce:
        for (int64_t i = 0; i < n.ival; ++i)
          if (!expr(k_.reduceExtents[static_cast<size_t>(n.c + i)])) return false;
        return expr(n.a);
      default: return true;
    }
  }

  bool groupRead(ExprId index) {
    std::optional<Linear> l = linearIn(k_, index, var_);
    if (!l || l->coef != 1) return false;
    int64_t within;
    if (__builtin_sub_overflow(l->offset, c0_, &within) || within < 0 || within % columns_ != 0) return false;
    return within / columns_ < groups_;
  }

  const LoopKernel& k_;
  int32_t c_;
  int64_t c0_;
  int32_t var_;
  int64_t columns_, groups_;
  std::unordered_set<ExprId> seen_;
};

}  // namespace

std::optional<int64_t> epilogueColumnGroups(const LoopKernel& k, const StmtNode& gemm, const StmtNode& loop) {
  if (gemm.kind != StmtKind::Gemm || loop.kind != StmtKind::For || !isParallel(loop.loop)) return std::nullopt;
  const GemmArgs& g = gemm.gemm;
  if (g.packedB < 0 || g.bias >= 0 || g.relu || g.transA || g.accumulate) return std::nullopt;
  auto constant = [&](ExprId e, int64_t& v) {
    const ExprNode& node = k.expr(e);
    v = node.ival;
    return node.kind == ExprKind::IntConst;
  };
  int64_t m = 0, n = 0, c0 = 0, columns = 0;
  if (!constant(g.m, m) || m != 1 || !constant(g.n, n) || !constant(g.cOffset, c0) || !constant(loop.extent, columns) ||
      columns <= 0 || n <= 0 || n % columns != 0)
    return std::nullopt;
  int64_t groups = n / columns;
  ColumnGroupCheck check(k, g.c, c0, loop.var, columns, groups);
  if (!check.stmts(loop.body)) return std::nullopt;
  return groups;
}

}  // namespace kiln::loop
