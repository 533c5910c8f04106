// Splitting loops at the borders of padded windows (see border_split.h).
#include "kernel_ir/border_split.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernel_ir/range_fold.h"

namespace kiln::loop {

namespace {

// Where a loop of extent `extent` splits: [0, head) and [extent - tail, extent)
// peeled off.
struct Borders {
  int64_t head = 0, tail = 0;
};

class BorderSplitter {
 public:
  explicit BorderSplitter(LoopKernel& k) : k_(k), b_(k) {}

  int run() {
    // Most kernels (element-wise chains, reductions) compare no integers at all:
    // nothing to split, and no per-loop analysis on the JIT's path.
    bool compares = std::any_of(k_.exprs.begin(), k_.exprs.end(), [&](const ExprNode& n) { return isIntComparison(k_, n); });
    if (compares && k_.body >= 0) k_.body = visit(k_.body);
    return splits_;
  }

 private:
  // The statement to put in place of `id`: a block of the pieces where a loop
  // splits; otherwise `id` itself, its children visited (and replaced in place:
  // each statement has one parent).
  StmtId visit(StmtId id) {
    if (k_.stmt(id).kind == StmtKind::For)
      if (std::optional<Borders> cut = bordersOf(id)) return split(id, *cut);
    for (bool orElse : {false, true}) {
      std::vector<StmtId> children = orElse ? k_.stmt(id).orElse : k_.stmt(id).body;
      for (StmtId& c : children) c = visit(c);  // may append statements: k_.stmts moves
      (orElse ? k_.stmts[static_cast<size_t>(id)].orElse : k_.stmts[static_cast<size_t>(id)].body) = std::move(children);
    }
    return id;
  }

  bool onlyElementWise(StmtId id) const {
    const StmtNode& s = k_.stmt(id);
    if (s.kind == StmtKind::Gemm || s.kind == StmtKind::Conv2d) return false;
    for (const auto* list : {&s.body, &s.orElse})
      for (StmtId c : *list)
        if (!onlyElementWise(c)) return false;
    return true;
  }

  // The shortest head and tail after which the interior decides as many of the
  // body's comparisons as the narrowest interior allowed would; nullopt when
  // narrowing decides nothing more (no guard on this variable's borders).
  std::optional<Borders> bordersOf(StmtId id) {
    const StmtNode& s = k_.stmt(id);
    int64_t extent;
    if (!b_.isIntConst(s.extent, &extent)) return std::nullopt;
    int64_t most = std::min(kMaxBorder, (extent - kMinInterior) / 2);
    if (most <= 0 || !onlyElementWise(id)) return std::nullopt;
    int32_t var = s.var;
    int whole = undecidedComparisons(k_, id, var, 0, extent - 1);
    if (whole == 0) return std::nullopt;
    int best = undecidedComparisons(k_, id, var, most, extent - 1 - most);
    if (best >= whole) return std::nullopt;
    Borders cut{most, most};
    while (cut.head > 0 && undecidedComparisons(k_, id, var, cut.head - 1, extent - 1 - most) == best) --cut.head;
    while (cut.tail > 0 && undecidedComparisons(k_, id, var, cut.head, extent - cut.tail) == best) --cut.tail;
    return cut;
  }

  StmtId split(StmtId id, Borders cut) {
    const StmtNode loop = k_.stmt(id);  // a copy: pieces append to k_.stmts
    int64_t extent = 0;
    b_.isIntConst(loop.extent, &extent);
    ++splits_;
    // Head and tail are a few iterations each: not worth a vector loop or a
    // parallel dispatch.
    LoopKind border = LoopKind::Serial;
    std::vector<StmtId> pieces;
    if (cut.head > 0) pieces.push_back(piece(loop, 0, cut.head, border));
    pieces.push_back(piece(loop, cut.head, extent - cut.head - cut.tail, loop.loop));
    if (cut.tail > 0) pieces.push_back(piece(loop, extent - cut.tail, cut.tail, border));
    // Each piece's own loops may split in turn.
    for (StmtId& p : pieces) {
      std::vector<StmtId> body = k_.stmt(p).body;
      for (StmtId& c : body) c = visit(c);
      k_.stmts[static_cast<size_t>(p)].body = std::move(body);
    }
    return b_.block(std::move(pieces));
  }

  // `loop` over [begin, begin + count): a fresh variable v, the body copied with
  // the old variable replaced by v + begin.
  StmtId piece(const StmtNode& loop, int64_t begin, int64_t count, LoopKind kind) {
    int32_t v = b_.newVar();
    var_ = loop.var;
    replacement_ = begin == 0 ? b_.var(v) : b_.add(b_.var(v), b_.intConst(begin));
    memo_.clear();
    std::vector<StmtId> body;
    for (StmtId c : loop.body) body.push_back(copy(c));
    // No prefetch hint: its offset is relative to the old variable.
    return b_.forLoop(v, b_.intConst(count), kind, std::move(body));
  }

  StmtId copy(StmtId id) {
    StmtNode s = k_.stmt(id);
    for (ExprId* e : {&s.extent, &s.index, &s.value, &s.prefetchOffset}) *e = substitute(*e);
    for (auto* list : {&s.body, &s.orElse})
      for (StmtId& c : *list) c = copy(c);
    k_.stmts.push_back(std::move(s));
    return static_cast<StmtId>(k_.stmts.size() - 1);
  }

  // `e` with var_ replaced by replacement_, rebuilt through the builder (which
  // folds what becomes constant); shared subexpressions stay shared (memo_).
  ExprId substitute(ExprId e) {
    if (e < 0) return e;
    if (auto it = memo_.find(e); it != memo_.end()) return it->second;
    const ExprNode n = k_.expr(e);  // a copy: the builder appends to k_.exprs
    ExprId out = e;
    switch (n.kind) {
      case ExprKind::Var: out = n.a == var_ ? replacement_ : e; break;
      case ExprKind::Load: out = b_.withOperands(e, n.a, substitute(n.b), n.c); break;
      case ExprKind::Unary:
      case ExprKind::Cast:
      case ExprKind::Reduce: out = b_.withOperands(e, substitute(n.a), n.b, n.c); break;
      case ExprKind::Binary: out = b_.withOperands(e, substitute(n.a), substitute(n.b), n.c); break;
      case ExprKind::Select: out = b_.withOperands(e, substitute(n.a), substitute(n.b), substitute(n.c)); break;
      default: break;
    }
    memo_.emplace(e, out);
    return out;
  }

  LoopKernel& k_;
  LoopBuilder b_;
  int splits_ = 0;
  int32_t var_ = -1;
  ExprId replacement_ = -1;
  std::unordered_map<ExprId, ExprId> memo_;
};

}  // namespace

int splitBorders(LoopKernel& k) { return BorderSplitter(k).run(); }

}  // namespace kiln::loop
