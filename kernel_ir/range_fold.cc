// Folding guards and selects that the loops' bounds decide (see range_fold.h).
#include "kernel_ir/range_fold.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kiln::loop {

namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// [lo, hi]; kMin and kMax stand for unbounded sides (arithmetic that reaches
// them stays there, which only ever widens an interval).
struct Range {
  int64_t lo = kMin, hi = kMax;
};

bool bounded(const Range& r) { return r.lo != kMin && r.hi != kMax; }

// A bound that overflows int64 becomes unbounded on its side (only ever wider).
Range add(const Range& x, const Range& y) {
  Range r;
  int64_t v;
  if (x.lo != kMin && y.lo != kMin && !__builtin_add_overflow(x.lo, y.lo, &v)) r.lo = v;
  if (x.hi != kMax && y.hi != kMax && !__builtin_add_overflow(x.hi, y.hi, &v)) r.hi = v;
  return r;
}

Range sub(const Range& x, const Range& y) {
  Range r;
  int64_t v;
  if (x.lo != kMin && y.hi != kMax && !__builtin_sub_overflow(x.lo, y.hi, &v)) r.lo = v;
  if (x.hi != kMax && y.lo != kMin && !__builtin_sub_overflow(x.hi, y.lo, &v)) r.hi = v;
  return r;
}

Range mul(const Range& x, const Range& y) {
  int64_t c[4];
  bool overflow = !bounded(x) || !bounded(y) || __builtin_mul_overflow(x.lo, y.lo, &c[0]) ||
                  __builtin_mul_overflow(x.lo, y.hi, &c[1]) || __builtin_mul_overflow(x.hi, y.lo, &c[2]) ||
                  __builtin_mul_overflow(x.hi, y.hi, &c[3]);
  if (overflow) {
    // Non-negative times non-negative stays non-negative.
    if (x.lo >= 0 && y.lo >= 0) return {0, kMax};
    return {};
  }
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

// Division by a positive constant is monotonic (truncating or flooring).
Range divide(const Range& x, int64_t c, bool floor) {
  auto q = [&](int64_t v) {
    int64_t t = v / c;
    return floor && (v % c != 0) && v < 0 ? t - 1 : t;
  };
  return {x.lo == kMin ? kMin : q(x.lo), x.hi == kMax ? kMax : q(x.hi)};
}

std::optional<bool> compare(BinaryOp op, const Range& x, const Range& y) {
  switch (op) {
    case BinaryOp::Lt:
      if (x.hi != kMax && y.lo != kMin && x.hi < y.lo) return true;
      if (x.lo != kMin && y.hi != kMax && x.lo >= y.hi) return false;
      return std::nullopt;
    case BinaryOp::Le:
      if (x.hi != kMax && y.lo != kMin && x.hi <= y.lo) return true;
      if (x.lo != kMin && y.hi != kMax && x.lo > y.hi) return false;
      return std::nullopt;
    case BinaryOp::Gt: return compare(BinaryOp::Lt, y, x);
    case BinaryOp::Ge: return compare(BinaryOp::Le, y, x);
    case BinaryOp::Eq:
    case BinaryOp::Ne: {
      std::optional<bool> eq;
      if (bounded(x) && bounded(y) && x.lo == x.hi && y.lo == y.hi) eq = x.lo == y.lo;
      else if ((x.hi != kMax && y.lo != kMin && x.hi < y.lo) || (y.hi != kMax && x.lo != kMin && y.hi < x.lo)) eq = false;
      if (!eq) return std::nullopt;
      return op == BinaryOp::Eq ? *eq : !*eq;
    }
    default: return std::nullopt;
  }
}

// Each loop variable's range: [0, extent - 1] of the loops that bind it (the
// widest, should one be bound twice), unbounded above for a run-time extent.
using VarRanges = std::unordered_map<int32_t, Range>;

VarRanges loopVariableRanges(const LoopKernel& k) {
  VarRanges vars;
  auto bind = [&](int32_t var, ExprId extent) {
    const ExprNode& n = k.expr(extent);
    int64_t hi = n.kind != ExprKind::IntConst ? kMax : n.ival <= 0 ? 0 : n.ival - 1;
    auto [it, fresh] = vars.emplace(var, Range{0, hi});
    if (!fresh) it->second.hi = std::max(it->second.hi, hi);
  };
  for (const StmtNode& s : k.stmts)
    if (s.kind == StmtKind::For) bind(s.var, s.extent);
  for (size_t i = 0; i < k.reduceVars.size(); ++i) bind(k.reduceVars[i], k.reduceExtents[i]);
  return vars;
}

// Only index arithmetic (int64) gets a range from its operands: narrower
// integers wrap at their width, which these intervals do not model. `range`
// gives an operand's range.
template <class OperandRange>
Range rangeOf(const LoopKernel& k, const ExprNode& n, const VarRanges& vars, OperandRange range) {
  if (n.kind == ExprKind::IntConst) return {n.ival, n.ival};
  if (n.type != DType::Int64) return {};
  switch (n.kind) {
    case ExprKind::Dim: return {0, kMax};
    case ExprKind::Var: {
      auto it = vars.find(n.a);
      return it == vars.end() ? Range{0, kMax} : it->second;
    }
    case ExprKind::Select: {
      const Range &x = range(n.b), &y = range(n.c);
      return {std::min(x.lo, y.lo), std::max(x.hi, y.hi)};
    }
    case ExprKind::Binary: break;
    default: return {};
  }
  const Range &x = range(n.a), &y = range(n.b);
  const ExprNode& rhs = k.expr(n.b);
  int64_t c = rhs.ival;
  bool positiveConstant = rhs.kind == ExprKind::IntConst && c > 0;
  switch (static_cast<BinaryOp>(n.op)) {
    case BinaryOp::Add: return add(x, y);
    case BinaryOp::Sub: return sub(x, y);
    case BinaryOp::Mul: return mul(x, y);
    case BinaryOp::Div: return positiveConstant ? divide(x, c, false) : Range{};
    case BinaryOp::FloorDiv: return positiveConstant ? divide(x, c, true) : Range{};
    case BinaryOp::Mod:
      if (!positiveConstant) return {};
      return x.lo >= 0 ? Range{0, std::min(x.hi, c - 1)} : Range{-(c - 1), c - 1};
    case BinaryOp::FloorMod:
      if (!positiveConstant) return {};
      return {0, x.lo >= 0 ? std::min(x.hi, c - 1) : c - 1};
    case BinaryOp::Max: return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
    case BinaryOp::Min: return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
    default: return {};
  }
}

// An integer comparison's value over the ranges, or nullopt.
template <class OperandRange>
std::optional<bool> decide(const LoopKernel& k, const ExprNode& n, OperandRange range) {
  if (!isIntComparison(k, n)) return std::nullopt;
  return compare(static_cast<BinaryOp>(n.op), range(n.a), range(n.b));
}

class RangeFolder {
 public:
  explicit RangeFolder(LoopKernel& k) : k_(k), b_(k) {}

  int run() {
    vars_ = loopVariableRanges(k_);
    const auto n = static_cast<ExprId>(k_.exprs.size());
    to_.resize(static_cast<size_t>(n));
    ranges_.resize(static_cast<size_t>(n));
    // Children have smaller ids than their parents (expressions are built bottom-up).
    for (ExprId id = 0; id < n; ++id) {
      ranges_[static_cast<size_t>(id)] = rangeOf(k_, k_.expr(id), vars_, [&](ExprId e) -> const Range& { return range(e); });
      to_[static_cast<size_t>(id)] = rewrite(id);
    }
    for (StmtNode& s : k_.stmts) remapStatement(s);
    for (ExprId& e : k_.reduceExtents) e = map(e);
    return decided_;
  }

 private:
  ExprId map(ExprId e) const { return e < 0 || static_cast<size_t>(e) >= to_.size() ? e : to_[static_cast<size_t>(e)]; }
  const Range& range(ExprId e) const { return ranges_[static_cast<size_t>(e)]; }

  // Comparisons the ranges decide become constants; everything above them is
  // rebuilt through the builder, whose folds take the rest away.
  ExprId rewrite(ExprId id) {
    const ExprNode& n = k_.expr(id);
    if (std::optional<bool> v = decide(k_, n, [&](ExprId e) -> const Range& { return range(e); })) {
      ++decided_;
      return b_.intConst(*v ? 1 : 0, DType::Bool);
    }
    if (n.kind == ExprKind::Load) return b_.withOperands(id, n.a, map(n.b), n.c);
    return b_.withOperands(id, map(n.a), map(n.b), map(n.c));
  }

  void remapStatement(StmtNode& s) {
    switch (s.kind) {
      case StmtKind::For:
        s.extent = map(s.extent);
        s.prefetchOffset = map(s.prefetchOffset);
        break;
      case StmtKind::Store:
        s.index = map(s.index);
        s.value = map(s.value);
        break;
      case StmtKind::If: s.value = map(s.value); break;
      case StmtKind::Gemm: {
        GemmArgs& g = s.gemm;
        for (ExprId* e : {&g.m, &g.n, &g.k, &g.lda, &g.ldb, &g.ldc, &g.aOffset, &g.bOffset, &g.cOffset}) *e = map(*e);
        break;
      }
      case StmtKind::Conv2d:
        for (ExprId& e : s.conv.dims) e = map(e);
        if (s.conv.next.w >= 0)
          for (ExprId& e : s.conv.next.dims) e = map(e);
        break;
      case StmtKind::Block: break;
    }
  }

  LoopKernel& k_;
  LoopBuilder b_;
  VarRanges vars_;
  std::vector<ExprId> to_;
  std::vector<Range> ranges_;
  int decided_ = 0;
};

}  // namespace

bool isIntComparison(const LoopKernel& k, const ExprNode& n) {
  return n.kind == ExprKind::Binary && isComparison(static_cast<BinaryOp>(n.op)) && !isFloat(k.expr(n.a).type);
}

int foldByRanges(LoopKernel& k) { return RangeFolder(k).run(); }

int undecidedComparisons(const LoopKernel& k, StmtId stmt, int32_t var, int64_t lo, int64_t hi) {
  VarRanges vars = loopVariableRanges(k);
  vars[var] = {lo, hi};
  std::vector<std::optional<Range>> memo(k.exprs.size());
  // Operands have smaller ids than their users, so the recursion is as deep as
  // the expression, not the kernel.
  auto range = [&](auto& self, ExprId e) -> const Range& {
    auto& slot = memo[static_cast<size_t>(e)];
    if (!slot) slot = rangeOf(k, k.expr(e), vars, [&](ExprId o) -> const Range& { return self(self, o); });
    return *slot;
  };
  std::vector<bool> seen(k.exprs.size());
  std::vector<ExprId> work;
  auto visit = [&](ExprId e) {
    if (e >= 0 && !seen[static_cast<size_t>(e)]) {
      seen[static_cast<size_t>(e)] = true;
      work.push_back(e);
    }
  };
  std::vector<StmtId> stmts{stmt};
  while (!stmts.empty()) {
    const StmtNode& s = k.stmt(stmts.back());
    stmts.pop_back();
    for (ExprId e : {s.extent, s.index, s.value}) visit(e);
    stmts.insert(stmts.end(), s.body.begin(), s.body.end());
    stmts.insert(stmts.end(), s.orElse.begin(), s.orElse.end());
  }
  int undecided = 0;
  while (!work.empty()) {
    ExprId e = work.back();
    work.pop_back();
    const ExprNode& n = k.expr(e);
    if (isIntComparison(k, n) && !decide(k, n, [&](ExprId o) -> const Range& { return range(range, o); })) ++undecided;
    switch (n.kind) {
      case ExprKind::Load: visit(n.b); break;
      case ExprKind::Unary:
      case ExprKind::Cast:
      case ExprKind::Reduce: visit(n.a); break;
      case ExprKind::Binary:
        visit(n.a);
        visit(n.b);
        break;
      case ExprKind::Select:
        visit(n.a);
        visit(n.b);
        visit(n.c);
        break;
      default: break;
    }
  }
  return undecided;
}

}  // namespace kiln::loop
