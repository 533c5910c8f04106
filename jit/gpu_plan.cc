// Planning a LoopKernel's GPU launches: which statements become which launches
// (and with what mapping), and what the host decides itself (branches on
// shapes, loops around launches). Pure loop-IR analysis; see gpu_plan.h.
#include <algorithm>
#include <functional>

#include "kiln/error.h"
#include "jit/gpu_plan.h"

namespace kiln::jit {

const char* gpuMappingName(GpuMapping m) {
  switch (m) {
    case GpuMapping::Flat: return "flat";
    case GpuMapping::Rows: return "rows";
    case GpuMapping::Gemm: return "gemm";
    case GpuMapping::Single: return "one thread";
  }
  return "?";
}

namespace {

using loop::ExprId;
using loop::ExprKind;
using loop::StmtId;
using loop::StmtKind;

// Reductions shorter than this run in each thread; longer ones are split over a block.
constexpr int64_t kSplitReductionFrom = 64;

class Planner {
 public:
  Planner(const loop::LoopKernel& k, const std::string& symbol, PtxModule& out) : k_(k), symbol_(symbol), out_(out) {}

  void run() {
    if (k_.body >= 0) planStmt(k_.body, out_.steps);
  }

 private:
  void planStmt(StmtId id, std::vector<PtxStep>& steps) {
    const loop::StmtNode& s = k_.stmt(id);
    switch (s.kind) {
      case StmtKind::Block:
        for (StmtId c : s.body) planStmt(c, steps);
        return;
      case StmtKind::If:
        if (loop::hostEvaluable(k_, s.value, scope_)) {
          PtxStep step;
          step.kind = PtxStep::Kind::If;
          step.expr = s.value;
          for (StmtId c : s.body) planStmt(c, step.body);
          for (StmtId c : s.orElse) planStmt(c, step.orElse);
          steps.push_back(std::move(step));
        } else {
          launch(id, GpuMapping::Single, steps);
        }
        return;
      case StmtKind::Gemm: launch(id, GpuMapping::Gemm, steps); return;
      case StmtKind::Conv2d: throw kiln::Error("internal: conv2d statements are lowered for CPUs only");
      case StmtKind::Store:
        launch(id, splitsReduction(id) ? GpuMapping::Rows : GpuMapping::Single, steps);
        return;
      case StmtKind::For: break;
    }
    if (containsGemm(id)) {
      if (!loop::hostEvaluable(k_, s.extent, scope_)) {
        launch(id, GpuMapping::Single, steps);
      } else if (s.body.size() == 1 && k_.stmt(s.body[0]).kind == StmtKind::Gemm) {
        PtxLaunch& l = launch(s.body[0], GpuMapping::Gemm, steps);
        l.batchVar = s.var;
        l.batch = s.extent;
      } else {
        // The loop runs on the host; its variable is an argument of every entry.
        PtxStep step;
        step.kind = PtxStep::Kind::Loop;
        step.expr = s.extent;
        step.var = s.var;
        if (std::find(out_.hostVars.begin(), out_.hostVars.end(), s.var) == out_.hostVars.end()) out_.hostVars.push_back(s.var);
        scope_.push_back(s.var);
        for (StmtId c : s.body) planStmt(c, step.body);
        scope_.pop_back();
        steps.push_back(std::move(step));
      }
      return;
    }
    // Collapse the nest while each inner extent is independent of the loops
    // around it, so one flat index covers it.
    std::vector<StmtId> chain{id};
    for (;;) {
      const loop::StmtNode& last = k_.stmt(chain.back());
      if (last.body.size() != 1) break;
      const loop::StmtNode& inner = k_.stmt(last.body[0]);
      if (inner.kind != StmtKind::For || !loop::hostEvaluable(k_, inner.extent, scope_)) break;
      chain.push_back(last.body[0]);
    }
    bool rows = false;
    for (StmtId c : k_.stmt(chain.back()).body) rows |= splitsReduction(c);
    if (rows) {
      // A row is an iteration of the loops the long reductions depend on; loops
      // inside those are shared out among the row's threads, so each reduction
      // runs once per row (layer_norm's mean: once per row, not per element).
      std::vector<char> used = splitReductionVars(chain.back());
      size_t keep = 1;
      for (size_t i = 0; i < chain.size(); ++i) {
        auto v = static_cast<size_t>(k_.stmt(chain[i]).var);
        if (v < used.size() && used[v]) keep = i + 1;
      }
      chain.resize(keep);
    }
    PtxLaunch& l = launch(id, rows ? GpuMapping::Rows : GpuMapping::Flat, steps);
    for (StmtId c : chain) {
      l.loopVars.push_back(k_.stmt(c).var);
      l.extents.push_back(k_.stmt(c).extent);
    }
  }

  PtxLaunch& launch(StmtId id, GpuMapping mapping, std::vector<PtxStep>& steps) {
    PtxLaunch l;
    l.entry = symbol_ + "_" + std::to_string(out_.launches.size());
    l.mapping = mapping;
    l.stmt = id;
    l.blockThreads = mapping == GpuMapping::Single ? 1 : kGpuBlockThreads;
    PtxStep step;
    step.kind = PtxStep::Kind::Launch;
    step.launch = static_cast<int32_t>(out_.launches.size());
    steps.push_back(std::move(step));
    out_.launches.push_back(std::move(l));
    return out_.launches.back();
  }

  // Every expression and statement under `id`, visited once.
  void walk(StmtId id, const std::function<void(ExprId)>& onExpr, const std::function<void(const loop::StmtNode&)>& onStmt) const {
    const loop::StmtNode& s = k_.stmt(id);
    onStmt(s);
    for (ExprId e : {s.extent, s.index, s.value})
      if (e >= 0) onExpr(e);
    for (StmtId c : s.body) walk(c, onExpr, onStmt);
    for (StmtId c : s.orElse) walk(c, onExpr, onStmt);
  }

  bool containsGemm(StmtId id) const {
    bool found = false;
    walk(id, [](ExprId) {}, [&](const loop::StmtNode& s) { found |= s.kind == StmtKind::Gemm; });
    return found;
  }

  // Whether `n` is a reduction long enough to share among a block's threads.
  bool longReduction(const loop::ExprNode& n) const {
    if (n.kind != ExprKind::Reduce) return false;
    auto op = static_cast<loop::ReduceOp>(n.op);
    if (op == loop::ReduceOp::ArgMax || op == loop::ReduceOp::ArgMin) return false;
    // Its length: the product of its extents (a run-time one counts as long).
    int64_t length = 1;
    for (int64_t l = 0; l < n.ival && length < kSplitReductionFrom; ++l) {
      const loop::ExprNode& x = k_.expr(k_.reduceExtents[static_cast<size_t>(n.c + l)]);
      length = x.kind == ExprKind::IntConst ? length * x.ival : kSplitReductionFrom;
    }
    return length >= kSplitReductionFrom;
  }

  // The loop variables (by id) that the long reductions under `id` read,
  // in their bodies or their extents.
  std::vector<char> splitReductionVars(StmtId id) const {
    std::vector<char> used(static_cast<size_t>(std::max(k_.numVars, 0)), 0), seen(k_.exprs.size(), 0);
    std::function<void(ExprId, bool)> visit = [&](ExprId e, bool inside) {
      if (e < 0) return;
      const loop::ExprNode& n = k_.expr(e);
      inside |= longReduction(n);
      // An expression is walked once outside long reductions and once inside.
      char mark = inside ? 2 : 1;
      if (seen[static_cast<size_t>(e)] & mark) return;
      seen[static_cast<size_t>(e)] |= mark;
      if (n.kind == ExprKind::Var) {
        if (inside && n.a >= 0 && static_cast<size_t>(n.a) < used.size()) used[static_cast<size_t>(n.a)] = 1;
        return;
      }
      if (n.kind == ExprKind::IntConst || n.kind == ExprKind::FloatConst || n.kind == ExprKind::Dim) return;
      if (n.kind == ExprKind::Load) {
        visit(n.b, inside);
        return;
      }
      visit(n.a, inside);
      if (n.kind == ExprKind::Reduce) {
        for (int64_t l = 0; l < n.ival; ++l) visit(k_.reduceExtents[static_cast<size_t>(n.c + l)], inside);
        return;
      }
      visit(n.b, inside);
      visit(n.c, inside);
    };
    for (StmtId c : k_.stmt(id).body) walk(c, [&](ExprId e) { visit(e, false); }, [](const loop::StmtNode&) {});
    return used;
  }

  // Whether a statement computes a reduction long enough to share among a block.
  bool splitsReduction(StmtId id) const {
    std::vector<char> seen(k_.exprs.size(), 0);
    bool found = false;
    std::function<void(ExprId)> visit = [&](ExprId e) {
      if (e < 0 || seen[static_cast<size_t>(e)] || found) return;
      seen[static_cast<size_t>(e)] = 1;
      const loop::ExprNode& n = k_.expr(e);
      if (longReduction(n)) found = true;
      if (n.kind == ExprKind::IntConst || n.kind == ExprKind::FloatConst || n.kind == ExprKind::Dim || n.kind == ExprKind::Var) return;
      if (n.kind == ExprKind::Load) {
        visit(n.b);
        return;
      }
      visit(n.a);
      if (n.kind != ExprKind::Reduce) {
        visit(n.b);
        visit(n.c);
      }
    };
    walk(id, visit, [](const loop::StmtNode&) {});
    return found;
  }

  const loop::LoopKernel& k_;
  const std::string& symbol_;
  PtxModule& out_;
  std::vector<int32_t> scope_;  // host loop variables in scope
};

}  // namespace

namespace {
void describeSteps(const PtxModule& m, const std::vector<PtxStep>& steps, int depth, std::string& out) {
  std::string indent = "//   " + std::string(static_cast<size_t>(depth) * 2, ' ');
  for (const PtxStep& s : steps) {
    switch (s.kind) {
      case PtxStep::Kind::Launch: {
        const PtxLaunch& l = m.launches[static_cast<size_t>(s.launch)];
        out += indent + "launch " + l.entry + " (" + gpuMappingName(l.mapping);
        if (l.mapping == GpuMapping::Flat || l.mapping == GpuMapping::Rows)
          out += ", " + std::to_string(l.loopVars.size()) + " loop" + (l.loopVars.size() == 1 ? "" : "s") + " collapsed";
        if (l.batchVar >= 0) out += ", batch of v" + std::to_string(l.batchVar) + " in grid z";
        out += ")\n";
        break;
      }
      case PtxStep::Kind::If:
        out += indent + "if (a condition on shapes, decided on the host)\n";
        describeSteps(m, s.body, depth + 1, out);
        if (!s.orElse.empty()) {
          out += indent + "else\n";
          describeSteps(m, s.orElse, depth + 1, out);
        }
        break;
      case PtxStep::Kind::Loop:
        out += indent + "for v" + std::to_string(s.var) + " (a host loop; v" + std::to_string(s.var) + " is an argument)\n";
        describeSteps(m, s.body, depth + 1, out);
        break;
    }
  }
}
}  // namespace

std::vector<std::string> entryPoints(const PtxModule& m) {
  std::vector<std::string> entries;
  for (const PtxLaunch& l : m.launches) entries.push_back(l.entry);
  for (const PtxLaunch& l : m.launches)
    if (l.mapping == GpuMapping::Gemm) entries.push_back(skinnyEntry(l));
  return entries;
}

std::string describePlan(const PtxModule& m) {
  std::string out;
  describeSteps(m, m.steps, 0, out);
  return out;
}

PtxModule planPtx(const loop::LoopKernel& k, const std::string& symbol) {
  PtxModule out;
  Planner(k, symbol, out).run();
  return out;
}

}  // namespace kiln::jit
