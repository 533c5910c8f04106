// Schedules: their text form, the space a kernel offers, and applying one to a LoopKernel.
#include "kernel_ir/schedule.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <unordered_map>

#include "kernel_ir/gemm_epilogue.h"
#include "kernel_ir/loop_ir.h"

namespace kiln::loop {

namespace {

template <class T>
std::string joinList(const std::vector<T>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ":" : "") + std::to_string(v[i]);
  return s;
}

template <class T>
bool parseInt(std::string_view text, T& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

template <class T>
bool parseList(std::string_view text, std::vector<T>& out) {
  out.clear();
  while (!text.empty()) {
    size_t colon = text.find(':');
    T v;
    if (!parseInt(text.substr(0, colon), v)) return false;
    out.push_back(v);
    if (colon == std::string_view::npos) break;
    text.remove_prefix(colon + 1);
    if (text.empty()) return false;
  }
  return !out.empty();
}

}  // namespace

std::string Schedule::toString() const {
  std::string s;
  auto add = [&](const std::string& kv) { s += (s.empty() ? "" : ",") + kv; };
  // An identity order and no tiles say nothing: left out, so equal schedules print equal.
  bool identity = true, untiled = true;
  for (size_t i = 0; i < order.size(); ++i) identity &= order[i] == static_cast<int32_t>(i);
  for (int64_t t : tile) untiled &= t <= 1;
  if (!identity) add("order=" + joinList(order));
  if (!untiled) add("tile=" + joinList(tile));
  if (vectorWidth) add("vec=" + std::to_string(vectorWidth));
  if (interleave != 1) add("interleave=" + std::to_string(interleave));
  if (unroll) add("unroll=" + std::to_string(unroll));
  if (!parallel) add("parallel=0");
  if (grainShift) add("grain=" + std::to_string(grainShift));
  if (!directConv) add("conv=gemm");
  if (convWinograd != 2) add("winograd=" + std::to_string(convWinograd));
  if (gemmKC) add("kc=" + std::to_string(gemmKC));
  if (gemmMCTiles) add("mc=" + std::to_string(gemmMCTiles));
  if (gemmTile) add("micro=" + std::to_string(gemmTile));
  if (gemmPackA) add("pack_a=1");
  if (gemmNarrow) add(gemmNarrow == 1 ? "narrow=panels" : "narrow=dot");
  if (streamingStores) add("stores=stream");
  if (!gemmThenInThreads) add("then=after");
  return s.empty() ? "default" : s;
}

std::optional<Schedule> Schedule::parse(std::string_view text, std::string* error) {
  Schedule s;
  auto fail = [&](const std::string& why) -> std::optional<Schedule> {
    if (error) *error = why;
    return std::nullopt;
  };
  if (text == "default") return s;
  if (text.empty()) return fail("empty schedule");
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) return fail("schedule item '" + std::string(item) + "' is not key=value");
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    bool ok = false;
    if (key == "order") {
      ok = parseList(value, s.order);
      std::vector<int32_t> sorted = s.order;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<int32_t>(i);
    } else if (key == "tile") {
      ok = parseList(value, s.tile);
      for (int64_t t : s.tile) ok = ok && t >= 0 && t <= (int64_t(1) << 30);
    } else if (key == "vec") {
      ok = parseInt(value, s.vectorWidth) && s.vectorWidth >= 1 && s.vectorWidth <= 64 &&
           (s.vectorWidth & (s.vectorWidth - 1)) == 0;
    } else if (key == "interleave") {
      ok = parseInt(value, s.interleave) && s.interleave >= 1 && s.interleave <= 16;
    } else if (key == "unroll") {
      ok = parseInt(value, s.unroll) && s.unroll >= 0 && s.unroll <= 64;
    } else if (key == "parallel") {
      int v = 0;
      ok = parseInt(value, v) && (v == 0 || v == 1);
      s.parallel = v == 1;
    } else if (key == "grain") {
      ok = parseInt(value, s.grainShift) && s.grainShift >= -10 && s.grainShift <= 20;
    } else if (key == "kc") {
      ok = parseInt(value, s.gemmKC) && s.gemmKC >= 64 && s.gemmKC <= 1024 && (s.gemmKC & (s.gemmKC - 1)) == 0;
    } else if (key == "mc") {
      ok = parseInt(value, s.gemmMCTiles) && s.gemmMCTiles >= 1 && s.gemmMCTiles <= 255;
    } else if (key == "micro") {
      ok = parseInt(value, s.gemmTile) && s.gemmTile >= 0 && s.gemmTile <= 1;
    } else if (key == "pack_a") {
      int v = 0;
      ok = parseInt(value, v) && (v == 0 || v == 1);
      s.gemmPackA = v == 1;
    } else if (key == "narrow") {
      ok = value == "panels" || value == "dot";
      s.gemmNarrow = value == "panels" ? 1 : 2;
    } else if (key == "stores") {
      ok = value == "stream" || value == "cached";
      s.streamingStores = value == "stream";
    } else if (key == "then") {
      ok = value == "threads" || value == "after";
      s.gemmThenInThreads = value == "threads";
    } else if (key == "winograd") {
      int v = 0;
      // (1, "on", is what logs before the 4x4 tiles wrote for the default.)
      ok = parseInt(value, v) && (v == 0 || v == 1 || v == 2 || v == 4);
      s.convWinograd = v == 1 ? 2 : v;
    } else if (key == "conv") {
      ok = value == "direct" || value == "gemm";
      s.directConv = value == "direct";
    } else {
      return fail("unknown schedule key '" + std::string(key) + "'");
    }
    if (!ok) return fail("bad value '" + std::string(value) + "' for schedule key '" + std::string(key) + "'");
  }
  if (!s.order.empty() && !s.tile.empty() && s.order.size() != s.tile.size())
    return fail("schedule order and tile name different numbers of loops");
  return s;
}

// ---- nests ----

namespace {

// A top-level perfect nest: loops each holding only the next, the innermost
// holding stores (directly or in one block).
struct Nest {
  std::vector<StmtId> loops;  // outermost first
  std::vector<StmtId> stores;
};

void collectNests(const LoopKernel& k, StmtId id, std::vector<Nest>& out) {
  const StmtNode& s = k.stmt(id);
  switch (s.kind) {
    case StmtKind::Block:
      for (StmtId c : s.body) collectNests(k, c, out);
      return;
    case StmtKind::If:
      for (StmtId c : s.body) collectNests(k, c, out);
      for (StmtId c : s.orElse) collectNests(k, c, out);
      return;
    case StmtKind::For: {
      Nest n;
      StmtId cur = id;
      for (;;) {
        n.loops.push_back(cur);
        const StmtNode& l = k.stmt(cur);
        if (l.body.size() == 1 && k.stmt(l.body[0]).kind == StmtKind::For) {
          cur = l.body[0];
          continue;
        }
        std::vector<StmtId> inner = l.body;
        if (inner.size() == 1 && k.stmt(inner[0]).kind == StmtKind::Block) inner = k.stmt(inner[0]).body;
        bool storesOnly = !inner.empty();
        for (StmtId c : inner) storesOnly &= k.stmt(c).kind == StmtKind::Store;
        if (storesOnly) {
          n.stores = inner;
          out.push_back(std::move(n));
        } else {
          for (StmtId c : l.body) collectNests(k, c, out);
        }
        return;
      }
    }
    default:
      return;
  }
}

// Buffers an expression loads and loop variables it reads.
void scanExpr(const LoopKernel& k, ExprId e, std::vector<bool>& loads, std::vector<bool>& vars,
              std::vector<bool>& seen) {
  std::vector<ExprId> stack{e};
  while (!stack.empty()) {
    ExprId id = stack.back();
    stack.pop_back();
    if (id < 0 || seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    const ExprNode& n = k.expr(id);
    if (n.kind == ExprKind::Load) loads[static_cast<size_t>(n.a)] = true;
    if (n.kind == ExprKind::Var) vars[static_cast<size_t>(n.a)] = true;
    if (n.kind == ExprKind::Reduce) {
      for (int64_t i = 0; i < n.ival; ++i) stack.push_back(k.reduceExtents[static_cast<size_t>(n.c + i)]);
      stack.push_back(n.a);
      continue;
    }
    stack.push_back(n.a);
    stack.push_back(n.b);
    if (n.kind == ExprKind::Select) stack.push_back(n.c);
  }
}

// Whether the nest's loops may be reordered and split: every iteration stores
// elements no other iteration reads (nothing stored is loaded in the nest) and
// no loop's extent depends on another nest loop's variable.
bool transformable(const LoopKernel& k, const Nest& n) {
  std::vector<bool> loads(k.buffers.size()), vars(static_cast<size_t>(k.numVars)), seen(k.exprs.size());
  for (StmtId s : n.stores) {
    scanExpr(k, k.stmt(s).index, loads, vars, seen);
    scanExpr(k, k.stmt(s).value, loads, vars, seen);
  }
  for (StmtId s : n.stores)
    if (loads[static_cast<size_t>(k.stmt(s).buffer)]) return false;
  for (StmtId l : n.loops) {
    std::vector<bool> extentVars(static_cast<size_t>(k.numVars)), ignored(k.buffers.size()), fresh(k.exprs.size());
    scanExpr(k, k.stmt(l).extent, ignored, extentVars, fresh);
    for (StmtId m : n.loops)
      if (extentVars[static_cast<size_t>(k.stmt(m).var)]) return false;
    if (k.stmt(l).prefetchBuffer >= 0) return false;
  }
  return true;
}

// Rebuilds expressions with some loop variables replaced.
class Substitution {
 public:
  Substitution(LoopBuilder& b, std::unordered_map<int32_t, ExprId> vars) : b_(b), vars_(std::move(vars)) {}
  ExprId operator()(ExprId id) {
    auto it = memo_.find(id);
    if (it != memo_.end()) return it->second;
    ExprNode n = b_.node(id);  // a copy: building appends to the node array
    ExprId out = id;
    switch (n.kind) {
      case ExprKind::Var: {
        auto v = vars_.find(static_cast<int32_t>(n.a));
        if (v != vars_.end()) out = v->second;
        break;
      }
      case ExprKind::Load: out = b_.load(n.a, (*this)(n.b)); break;
      case ExprKind::Unary: out = b_.unary(static_cast<UnaryOp>(n.op), (*this)(n.a)); break;
      case ExprKind::Binary: out = b_.binary(static_cast<BinaryOp>(n.op), (*this)(n.a), (*this)(n.b)); break;
      case ExprKind::Select: out = b_.select((*this)(n.a), (*this)(n.b), (*this)(n.c)); break;
      case ExprKind::Cast: out = b_.cast(n.type, (*this)(n.a)); break;
      case ExprKind::Reduce: {
        std::vector<int32_t> rvars;
        std::vector<ExprId> extents;
        for (int64_t i = 0; i < n.ival; ++i) {
          rvars.push_back(b_.kernel().reduceVars[static_cast<size_t>(n.c + i)]);
          extents.push_back((*this)(b_.kernel().reduceExtents[static_cast<size_t>(n.c + i)]));
        }
        out = b_.reduce(static_cast<ReduceOp>(n.op), rvars, extents, (*this)(n.a));
        break;
      }
      default: break;
    }
    memo_[id] = out;
    return out;
  }

 private:
  LoopBuilder& b_;
  std::unordered_map<int32_t, ExprId> vars_;
  std::unordered_map<ExprId, ExprId> memo_;
};

// Rewrites nest `n` in place (its outermost statement id keeps its place in the
// parent) as `order` and `tile` say.
void transformNest(LoopKernel& k, const Nest& n, const Schedule& s) {
  size_t depth = n.loops.size();
  LoopBuilder b(k);
  LoopKind outerKind = k.stmt(n.loops.front()).loop, innerKind = k.stmt(n.loops.back()).loop;
  bool par = isParallel(outerKind), vec = isVectorized(innerKind);
  std::vector<int32_t> order = s.order;
  if (order.empty())
    for (size_t i = 0; i < depth; ++i) order.push_back(static_cast<int32_t>(i));
  std::vector<std::pair<int32_t, ExprId>> tileLoops, pointLoops;  // (var, extent), outermost first
  std::unordered_map<int32_t, ExprId> subst;
  for (int32_t i : order) {
    const StmtNode& l = k.stmt(n.loops[static_cast<size_t>(i)]);
    int64_t t = s.tile.empty() ? 0 : s.tile[static_cast<size_t>(i)];
    int64_t extent = -1;
    b.isIntConst(l.extent, &extent);
    if (t <= 1 || (extent >= 0 && t >= extent)) {
      pointLoops.push_back({l.var, l.extent});
      continue;
    }
    int32_t outer = b.newVar(), inner = b.newVar();
    ExprId tc = b.intConst(t);
    ExprId tiles = b.binary(BinaryOp::FloorDiv, b.add(l.extent, b.intConst(t - 1)), tc);
    ExprId start = b.mul(b.var(outer), tc);
    ExprId remaining = b.binary(BinaryOp::Sub, l.extent, start);
    ExprId innerExtent = extent >= 0 && extent % t == 0 ? tc : b.binary(BinaryOp::Min, tc, remaining);
    tileLoops.push_back({outer, tiles});
    pointLoops.push_back({inner, innerExtent});
    subst[l.var] = b.add(start, b.var(inner));
  }
  Substitution sub(b, subst);
  std::vector<StmtId> stores;
  for (StmtId st : n.stores) {
    StmtNode store = k.stmt(st);
    stores.push_back(b.store(store.buffer, sub(store.index), sub(store.value)));
  }
  std::vector<std::pair<int32_t, ExprId>> loops = tileLoops;
  loops.insert(loops.end(), pointLoops.begin(), pointLoops.end());
  StmtId body = stores.size() == 1 ? stores[0] : b.block(stores);
  for (size_t d = loops.size(); d-- > 0;) {
    bool outermost = d == 0, innermost = d + 1 == loops.size();
    LoopKind kind = LoopKind::Serial;
    if (outermost && par) kind = innermost && vec ? LoopKind::ParallelVectorized : LoopKind::Parallel;
    else if (innermost && vec) kind = LoopKind::Vectorized;
    body = b.forLoop(loops[d].first, loops[d].second, kind, {body});
  }
  // The new outermost loop takes the old one's place.
  k.stmts[static_cast<size_t>(n.loops.front())] = k.stmts[static_cast<size_t>(body)];
}

// Whether loop `l` stores in its own body (directly or in a block there), where
// its vectorized iterations make vector stores.
bool storesDirectly(const LoopKernel& k, const StmtNode& l) {
  for (StmtId c : l.body) {
    const StmtNode& s = k.stmt(c);
    if (s.kind == StmtKind::Store) return true;
    if (s.kind == StmtKind::Block)
      for (StmtId b : s.body)
        if (k.stmt(b).kind == StmtKind::Store) return true;
  }
  return false;
}

}  // namespace

ScheduleSpace scheduleSpaceOf(const LoopKernel& k) {
  ScheduleSpace space;
  std::vector<Nest> nests;
  if (k.body >= 0) collectNests(k, k.body, nests);
  for (const Nest& n : nests) {
    if (!transformable(k, n) || static_cast<int32_t>(n.loops.size()) <= space.nestDepth) continue;
    space.nestDepth = static_cast<int32_t>(n.loops.size());
    space.nestExtents.clear();
    for (StmtId l : n.loops) {
      const ExprNode& e = k.expr(k.stmt(l).extent);
      space.nestExtents.push_back(e.kind == ExprKind::IntConst ? e.ival : -1);
    }
  }
  for (const StmtNode& s : k.stmts) {
    if (s.kind == StmtKind::Gemm) {
      space.hasGemm = space.hasParallel = true;
      const ExprNode& n = k.expr(s.gemm.n);
      if (!s.gemm.transA && s.gemm.transB && (n.kind != ExprKind::IntConst || n.ival <= kNarrowGemmMostColumns))
        space.hasNarrowGemm = true;
    }
    if (s.kind == StmtKind::Conv2d) {
      space.hasConv = space.hasParallel = true;
      // dims: n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups (jit::Conv2dDims).
      auto dim = [&](size_t i) {
        const ExprNode& e = k.expr(s.conv.dims[i]);
        return e.kind == ExprKind::IntConst ? e.ival : -1;
      };
      int64_t stride = dim(5) == 3 && dim(6) == 3 ? winogradStride(dim(9), dim(10), dim(13), dim(14), dim(15)) : 0;
      space.hasWinogradConv |= stride != 0;
      space.hasWinogradTiles4x4 |= stride == 1;
    }
    if (s.kind == StmtKind::Block)
      for (size_t i = 0; i + 1 < s.body.size(); ++i)
        if (epilogueColumnGroups(k, k.stmt(s.body[i]), k.stmt(s.body[i + 1]))) space.hasGemmThen = true;
    if (s.kind == StmtKind::For) {
      if (isVectorized(s.loop)) space.hasVectorLoops = true;
      if (isVectorized(s.loop) && storesDirectly(k, s)) space.hasVectorStores = true;
      if (isParallel(s.loop)) space.hasParallel = true;
      if (s.loop == LoopKind::Serial) space.hasSerialInner = true;
    }
  }
  return space;
}

int ScheduleSpace::dimensions() const {
  return (nestDepth > 1 ? 2 : 0) + (nestDepth == 1 ? 1 : 0) + (hasVectorLoops ? 2 : 0) + (hasSerialInner ? 1 : 0) +
         (hasParallel ? 2 : 0) + (hasConv ? 1 : 0) + (hasWinogradConv ? 1 : 0) + (hasGemm ? 4 : 0) +
         (hasNarrowGemm ? 1 : 0) +
         (hasVectorStores ? 1 : 0) + (hasGemmThen ? 1 : 0);
}

namespace {
template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> options) {
  std::uniform_int_distribution<size_t> d(0, options.size() - 1);
  return options.begin()[d(rng)];
}

int64_t pickTile(std::mt19937_64& rng, int64_t extent) {
  int64_t t = pick<int64_t>(rng, {0, 4, 8, 16, 32, 64, 128, 256});
  return extent > 0 && t >= extent ? 0 : t;
}
}  // namespace

Schedule ScheduleSpace::mutate(const Schedule& s, std::mt19937_64& rng) const {
  Schedule out = s;
  // Knobs this space has, drawn until one actually changes the schedule.
  for (int attempt = 0; attempt < 16 && out == s; ++attempt) {
    switch (std::uniform_int_distribution<int>(0, 15)(rng)) {
      case 0:
        if (nestDepth > 1) {
          out.order.resize(static_cast<size_t>(nestDepth));
          for (int32_t i = 0; i < nestDepth; ++i) out.order[static_cast<size_t>(i)] = i;
          std::shuffle(out.order.begin(), out.order.end(), rng);
          bool identity = std::is_sorted(out.order.begin(), out.order.end());
          if (identity) out.order.clear();
          if (!out.order.empty() && out.tile.empty()) out.tile.assign(static_cast<size_t>(nestDepth), 0);
        }
        break;
      case 1:
        if (nestDepth >= 1) {
          out.tile.resize(static_cast<size_t>(nestDepth), 0);
          size_t i = std::uniform_int_distribution<size_t>(0, out.tile.size() - 1)(rng);
          out.tile[i] = pickTile(rng, nestExtents[i]);
          if (std::all_of(out.tile.begin(), out.tile.end(), [](int64_t t) { return t == 0; }) && out.order.empty())
            out.tile.clear();
        }
        break;
      case 2:
        if (hasVectorLoops) out.vectorWidth = pick<int32_t>(rng, {0, 4, 8, 16, 32});
        break;
      case 3:
        if (hasVectorLoops) out.interleave = pick<int32_t>(rng, {1, 2, 4});
        break;
      case 4:
        if (hasSerialInner) out.unroll = pick<int32_t>(rng, {0, 1, 2, 4, 8});
        break;
      case 5:
        if (hasParallel) out.parallel = !out.parallel;
        break;
      case 6:
        if (hasParallel) out.grainShift = pick<int32_t>(rng, {-4, -2, 0, 2, 4});
        break;
      case 7:
        if (hasConv) out.directConv = !out.directConv;
        break;
      case 8:
        if (hasGemm) out.gemmKC = pick<int32_t>(rng, {0, 64, 256, 512, 1024});
        break;
      case 9:
        if (hasGemm) out.gemmMCTiles = pick<int32_t>(rng, {0, 1, 2, 4, 8, 16});
        break;
      case 10:
        if (hasGemm) out.gemmTile = 1 - out.gemmTile;
        break;
      case 11:
        if (hasGemm) out.gemmPackA = !out.gemmPackA;
        break;
      case 12:
        if (hasNarrowGemm) out.gemmNarrow = pick<int32_t>(rng, {0, 1, 2});
        break;
      case 13:
        if (hasVectorStores) out.streamingStores = !out.streamingStores;
        break;
      case 14:
        if (hasGemmThen) out.gemmThenInThreads = !out.gemmThenInThreads;
        break;
      case 15:
        if (hasWinogradTiles4x4) out.convWinograd = pick<int32_t>(rng, {0, 2, 4});
        else if (hasWinogradConv) out.convWinograd = out.convWinograd ? 0 : 2;
        break;
    }
  }
  return out;
}

Schedule ScheduleSpace::sample(std::mt19937_64& rng) const {
  Schedule s;
  int steps = std::uniform_int_distribution<int>(1, 4)(rng);
  for (int i = 0; i < steps; ++i) s = mutate(s, rng);
  return s;
}

void applySchedule(LoopKernel& k, const Schedule& s) {
  k.schedule = s;
  // The runtime packs a constant B for the tile its kernel runs (bit 0 stays transB).
  for (BufferDecl& b : k.buffers) {
    if (b.isPrepared() && b.preparedLayout == PreparedLayout::GemmB) b.preparedParam = (b.preparedParam & 1) | (s.gemmTile << 1);
    // Filters of a kernel that never takes minimal filtering are not prepared
    // with its transform; those of one that takes 4x4 tiles at stride 1, with theirs.
    if (b.isPrepared() && b.preparedLayout == PreparedLayout::ConvFilter) {
      int64_t groups = b.preparedParam & ((int64_t(1) << kConvFilterWinogradShift) - 1);
      int64_t form = b.preparedParam >> kConvFilterWinogradShift;
      if (form != 0) form = s.convWinograd == 0 ? 0 : winogradForm(winogradFormStride(form), s.convWinograd);
      b.preparedParam = groups | form << kConvFilterWinogradShift;
    }
  }
  if (k.body < 0 || (s.order.empty() && s.tile.empty())) return;
  size_t depth = std::max(s.order.size(), s.tile.size());
  std::vector<Nest> nests;
  collectNests(k, k.body, nests);
  for (const Nest& n : nests)
    if (n.loops.size() == depth && transformable(k, n)) transformNest(k, n, s);
}

}  // namespace kiln::loop
