// LoopKernel construction, folding and printing.
#include "kernel_ir/loop_ir.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kiln/error.h"

namespace kiln::loop {

const char* unaryName(UnaryOp op) {
  static const char* const names[] = {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
                                      "sin", "cos", "abs", "floor", "ceil", "round", "not", "exp_nonpositive"};
  return names[static_cast<int>(op)];
}
const char* binaryName(BinaryOp op) {
  static const char* const names[] = {"add", "sub", "mul", "div", "pow", "max", "min", "floordiv", "mod",
                                      "floormod", "eq", "ne", "lt", "le", "gt", "ge", "and", "or"};
  return names[static_cast<int>(op)];
}
const char* reduceName(ReduceOp op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "all", "any", "argmax", "argmin"};
  return names[static_cast<int>(op)];
}
bool isComparison(BinaryOp op) { return op >= BinaryOp::Eq && op <= BinaryOp::Ge; }

size_t LoopBuilder::KeyHash::operator()(const ExprNode& n) const {
  uint64_t bits;
  std::memcpy(&bits, &n.fval, sizeof bits);
  uint64_t h = (static_cast<uint64_t>(n.kind) << 56) ^ (static_cast<uint64_t>(n.type) << 48) ^
               (static_cast<uint64_t>(n.op) << 40);
  for (uint64_t v : {static_cast<uint64_t>(n.a), static_cast<uint64_t>(n.b), static_cast<uint64_t>(n.c),
                     static_cast<uint64_t>(n.ival), bits})
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

bool LoopBuilder::KeyEq::operator()(const ExprNode& x, const ExprNode& y) const {
  return x.kind == y.kind && x.type == y.type && x.op == y.op && x.a == y.a && x.b == y.b && x.c == y.c &&
         x.ival == y.ival && std::memcmp(&x.fval, &y.fval, sizeof x.fval) == 0;
}

ExprId LoopBuilder::intern(const ExprNode& n) {
  // Reductions are not shared: each introduces its own loop variables.
  if (n.kind != ExprKind::Reduce) {
    auto it = interned_.find(n);
    if (it != interned_.end()) return it->second;
  }
  ExprId id = static_cast<ExprId>(k_.exprs.size());
  k_.exprs.push_back(n);
  if (n.kind != ExprKind::Reduce) interned_.emplace(n, id);
  return id;
}

ExprId LoopBuilder::intConst(int64_t v, DType type) {
  ExprNode n{ExprKind::IntConst, type};
  n.ival = v;
  return intern(n);
}

ExprId LoopBuilder::floatConst(double v, DType type) {
  ExprNode n{ExprKind::FloatConst, type == DType::Float16 ? DType::Float32 : type};
  n.fval = v;
  return intern(n);
}

ExprId LoopBuilder::constant(double v, DType type) {
  if (isFloat(type)) return floatConst(v, type);
  if (isBool(type)) return intConst(v != 0 ? 1 : 0, DType::Bool);
  return intConst(static_cast<int64_t>(v), type);
}

ExprId LoopBuilder::dim(int32_t slot) {
  ExprNode n{ExprKind::Dim, DType::Int64};
  n.ival = slot;
  return intern(n);
}

ExprId LoopBuilder::var(int32_t id) {
  ExprNode n{ExprKind::Var, DType::Int64};
  n.a = id;
  return intern(n);
}

ExprId LoopBuilder::load(int32_t buffer, ExprId index) {
  DType t = k_.buffers.at(static_cast<size_t>(buffer)).dtype;
  ExprNode n{ExprKind::Load, t == DType::Float16 ? DType::Float32 : t};
  n.a = buffer;
  n.b = index;
  return intern(n);
}

ExprId LoopBuilder::unary(UnaryOp op, ExprId a) {
  ExprNode n{ExprKind::Unary, typeOf(a)};
  n.op = static_cast<uint8_t>(op);
  n.a = a;
  return intern(n);
}

ExprId LoopBuilder::binary(BinaryOp op, ExprId a, ExprId b) {
  // Folds that let provably true guards disappear.
  if (a == b && !isFloat(typeOf(a)) && (op == BinaryOp::Eq || op == BinaryOp::Le || op == BinaryOp::Ge))
    return intConst(1, DType::Bool);
  int64_t v;
  if (op == BinaryOp::And && typeOf(a) == DType::Bool) {
    if (isIntConst(a, &v)) return v ? b : a;
    if (isIntConst(b, &v)) return v ? a : b;
  }
  if (op == BinaryOp::Or && typeOf(a) == DType::Bool) {
    if (isIntConst(a, &v)) return v ? a : b;
    if (isIntConst(b, &v)) return v ? b : a;
  }
  if (op == BinaryOp::Sub && isIntConst(b, &v) && v == 0) return a;
  if (typeOf(a) != typeOf(b))
    throw Error(std::string("internal: loop IR ") + binaryName(op) + " of " + std::string(dtypeName(typeOf(a))) +
                " and " + std::string(dtypeName(typeOf(b))));
  ExprNode n{ExprKind::Binary, isComparison(op) ? DType::Bool : typeOf(a)};
  n.op = static_cast<uint8_t>(op);
  n.a = a;
  n.b = b;
  return intern(n);
}

ExprId LoopBuilder::select(ExprId cond, ExprId a, ExprId b) {
  int64_t v;
  if (isIntConst(cond, &v)) return v ? a : b;
  ExprNode n{ExprKind::Select, typeOf(a)};
  n.a = cond;
  n.b = a;
  n.c = b;
  return intern(n);
}

ExprId LoopBuilder::withOperands(ExprId id, ExprId a, ExprId b, ExprId c) {
  const ExprNode n = k_.expr(id);  // a copy: building appends to k_.exprs
  switch (n.kind) {
    case ExprKind::Load: return b == n.b ? id : load(n.a, b);
    case ExprKind::Unary: return a == n.a ? id : unary(static_cast<UnaryOp>(n.op), a);
    case ExprKind::Cast: return a == n.a ? id : cast(n.type, a);
    case ExprKind::Binary: {
      if (a == n.a && b == n.b) return id;
      auto op = static_cast<BinaryOp>(n.op);
      return op == BinaryOp::Add ? add(a, b) : op == BinaryOp::Mul ? mul(a, b) : binary(op, a, b);
    }
    case ExprKind::Select: return a == n.a && b == n.b && c == n.c ? id : select(a, b, c);
    case ExprKind::Reduce: {
      if (a == n.a) return id;
      ExprNode r = n;
      r.a = a;
      k_.exprs.push_back(r);
      return static_cast<ExprId>(k_.exprs.size() - 1);
    }
    default: return id;
  }
}

ExprId LoopBuilder::cast(DType type, ExprId a) {
  if (type == DType::Float16) type = DType::Float32;
  if (typeOf(a) == type) return a;
  ExprNode n{ExprKind::Cast, type};
  n.a = a;
  return intern(n);
}

ExprId LoopBuilder::reduce(ReduceOp op, const std::vector<int32_t>& vars, const std::vector<ExprId>& extents,
                           ExprId body) {
  bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  ExprNode n{ExprKind::Reduce, arg ? DType::Int64 : typeOf(body)};
  n.op = static_cast<uint8_t>(op);
  n.a = body;
  n.c = static_cast<int32_t>(k_.reduceVars.size());
  n.ival = static_cast<int64_t>(vars.size());
  k_.reduceVars.insert(k_.reduceVars.end(), vars.begin(), vars.end());
  k_.reduceExtents.insert(k_.reduceExtents.end(), extents.begin(), extents.end());
  return intern(n);
}

bool LoopBuilder::isIntConst(ExprId e, int64_t* value) const {
  const ExprNode& n = node(e);
  if (n.kind != ExprKind::IntConst) return false;
  if (value) *value = n.ival;
  return true;
}

ExprId LoopBuilder::add(ExprId a, ExprId b) {
  int64_t x, y;
  bool ca = isIntConst(a, &x), cb = isIntConst(b, &y);
  if (ca && cb) return intConst(x + y);
  if (ca && x == 0) return b;
  if (cb && y == 0) return a;
  // v % E + (v / E) * E is v for a constant E > 0: what the row-major index of a
  // variable split over two dimensions (merged reduction axes) adds up to, so the
  // load indexes by the variable itself, with no division left in the loop.
  auto isBinary = [&](ExprId e, BinaryOp op) {
    const ExprNode& n = node(e);
    return n.kind == ExprKind::Binary && static_cast<BinaryOp>(n.op) == op;
  };
  for (int swap = 0; swap < 2; ++swap, std::swap(a, b)) {
    int64_t e;
    if (!isBinary(a, BinaryOp::Mod) || !isBinary(b, BinaryOp::Mul)) continue;
    const ExprNode &mod = node(a), &mul = node(b);
    if (!isIntConst(mod.b, &e) || e <= 0 || mul.b != mod.b || !isBinary(mul.a, BinaryOp::Div)) continue;
    const ExprNode& div = node(mul.a);
    if (div.a == mod.a && div.b == mod.b) return mod.a;
  }
  return binary(BinaryOp::Add, a, b);
}

ExprId LoopBuilder::mul(ExprId a, ExprId b) {
  int64_t x, y;
  bool ca = isIntConst(a, &x), cb = isIntConst(b, &y);
  if (ca && cb) return intConst(x * y);
  if ((ca && x == 0) || (cb && y == 0)) return intConst(0);
  if (ca && x == 1) return b;
  if (cb && y == 1) return a;
  return binary(BinaryOp::Mul, a, b);
}

StmtId LoopBuilder::forLoop(int32_t var, ExprId extent, LoopKind kind, std::vector<StmtId> body) {
  StmtNode s{StmtKind::For};
  s.loop = kind;
  s.var = var;
  s.extent = extent;
  s.body = std::move(body);
  k_.stmts.push_back(std::move(s));
  return static_cast<StmtId>(k_.stmts.size() - 1);
}

StmtId LoopBuilder::store(int32_t buffer, ExprId index, ExprId value) {
  StmtNode s{StmtKind::Store};
  s.buffer = buffer;
  s.index = index;
  s.value = value;
  k_.stmts.push_back(std::move(s));
  return static_cast<StmtId>(k_.stmts.size() - 1);
}

StmtId LoopBuilder::block(std::vector<StmtId> body) {
  StmtNode s{StmtKind::Block};
  s.body = std::move(body);
  k_.stmts.push_back(std::move(s));
  return static_cast<StmtId>(k_.stmts.size() - 1);
}

StmtId LoopBuilder::ifThenElse(ExprId cond, std::vector<StmtId> thenBody, std::vector<StmtId> elseBody) {
  StmtNode s{StmtKind::If};
  s.value = cond;
  s.body = std::move(thenBody);
  s.orElse = std::move(elseBody);
  k_.stmts.push_back(std::move(s));
  return static_cast<StmtId>(k_.stmts.size() - 1);
}

void LoopBuilder::prefetchAlong(StmtId loop, int32_t buffer, ExprId offset) {
  StmtNode& s = k_.stmts[static_cast<size_t>(loop)];
  s.prefetchBuffer = buffer;
  s.prefetchOffset = offset;
}

StmtId LoopBuilder::gemm(const GemmArgs& args) {
  StmtNode s{StmtKind::Gemm};
  s.gemm = args;
  k_.stmts.push_back(std::move(s));
  return static_cast<StmtId>(k_.stmts.size() - 1);
}

StmtId LoopBuilder::conv2d(const Conv2dArgs& args) {
  StmtNode s{StmtKind::Conv2d};
  s.conv = args;
  k_.stmts.push_back(std::move(s));
  return static_cast<StmtId>(k_.stmts.size() - 1);
}

namespace {

std::string exprString(const LoopKernel& k, ExprId id) {
  const ExprNode& n = k.expr(id);
  auto sub = [&](ExprId e) { return exprString(k, e); };
  char buf[64];
  switch (n.kind) {
    case ExprKind::IntConst: return n.type == DType::Int64 ? std::to_string(n.ival) : std::to_string(n.ival) + std::string(dtypeShortName(n.type));
    case ExprKind::FloatConst: std::snprintf(buf, sizeof buf, "%.9g", n.fval); return buf + std::string(dtypeShortName(n.type));
    case ExprKind::Dim: return "shape[" + std::to_string(n.ival) + "]";
    case ExprKind::Var: return "i" + std::to_string(n.a);
    case ExprKind::Load: return k.buffers[static_cast<size_t>(n.a)].name + "[" + sub(n.b) + "]";
    case ExprKind::Unary: return std::string(unaryName(static_cast<UnaryOp>(n.op))) + "(" + sub(n.a) + ")";
    case ExprKind::Binary:
      return std::string(binaryName(static_cast<BinaryOp>(n.op))) + "(" + sub(n.a) + ", " + sub(n.b) + ")";
    case ExprKind::Select: return "select(" + sub(n.a) + ", " + sub(n.b) + ", " + sub(n.c) + ")";
    case ExprKind::Cast: return std::string(dtypeName(n.type)) + "(" + sub(n.a) + ")";
    case ExprKind::Reduce: {
      std::string s = std::string(reduceName(static_cast<ReduceOp>(n.op))) + "(";
      for (int64_t i = 0; i < n.ival; ++i) {
        size_t at = static_cast<size_t>(n.c + i);
        s += "i" + std::to_string(k.reduceVars[at]) + " < " + sub(k.reduceExtents[at]) + ", ";
      }
      return s + sub(n.a) + ")";
    }
  }
  return "?";
}

void stmtString(const LoopKernel& k, StmtId id, int indent, std::string& out) {
  const StmtNode& s = k.stmt(id);
  std::string pad(static_cast<size_t>(indent) * 2, ' ');
  switch (s.kind) {
    case StmtKind::For: {
      const char* kind = s.loop == LoopKind::ParallelVectorized ? "parallel vectorized "
                         : s.loop == LoopKind::Parallel       ? "parallel "
                         : s.loop == LoopKind::Vectorized     ? "vectorized "
                                                              : "";
      out += pad + kind + "for i" + std::to_string(s.var) + " < " + exprString(k, s.extent);
      if (s.prefetchBuffer >= 0)
        out += " prefetching " + k.buffers[static_cast<size_t>(s.prefetchBuffer)].name + "[" +
               exprString(k, s.prefetchOffset) + " + i" + std::to_string(s.var) + "]";
      out += ":\n";
      for (StmtId b : s.body) stmtString(k, b, indent + 1, out);
      break;
    }
    case StmtKind::Store:
      out += pad + k.buffers[static_cast<size_t>(s.buffer)].name + "[" + exprString(k, s.index) + "] = " +
             exprString(k, s.value) + "\n";
      break;
    case StmtKind::Block:
      for (StmtId b : s.body) stmtString(k, b, indent, out);
      break;
    case StmtKind::Gemm: {
      const GemmArgs& g = s.gemm;
      auto buf = [&](int32_t b) { return k.buffers[static_cast<size_t>(b)].name; };
      out += pad + "gemm " + buf(g.c) + "[" + exprString(k, g.cOffset) + "] " + (g.accumulate ? "+= " : "= ") + buf(g.a) +
             "[" + exprString(k, g.aOffset) + "]" + (g.transA ? "^T" : "") + " * " + buf(g.b) + "[" +
             exprString(k, g.bOffset) + "]" + (g.transB ? "^T" : "") + "  (m=" + exprString(k, g.m) +
             ", n=" + exprString(k, g.n) + ", k=" + exprString(k, g.k) + ")" +
             (g.bias >= 0 ? " + " + buf(g.bias) + "[j]" : "") + (g.relu ? ", relu" : "") + "\n";
      break;
    }
    case StmtKind::Conv2d: {
      const Conv2dArgs& c = s.conv;
      auto buf = [&](int32_t b) { return k.buffers[static_cast<size_t>(b)].name; };
      out += pad + "conv2d " + buf(c.out) + " = " + buf(c.x) + " * " + buf(c.w) + "  (";
      const char* names[] = {"n", "c", "h", "w", "o", "kh", "kw", "oh", "ow", "sh", "sw", "ph", "pw", "dh", "dw", "groups"};
      for (size_t i = 0; i < c.dims.size(); ++i)
        out += std::string(i ? ", " : "") + names[i] + "=" + exprString(k, c.dims[i]);
      out += ")";
      if (c.bias >= 0) out += " + " + buf(c.bias) + "[o]";
      if (c.relu) out += ", relu";
      if (c.next.w >= 0) {
        out += "\n" + pad + "  chained into * " + buf(c.next.w) + "  (";
        for (size_t i = 0; i < c.next.dims.size(); ++i)
          out += std::string(i ? ", " : "") + names[i] + "=" + exprString(k, c.next.dims[i]);
        out += ")";
        if (c.next.bias >= 0) out += " + " + buf(c.next.bias) + "[o]";
        if (c.next.relu) out += ", relu";
        out += ", through " + buf(c.next.between);
      }
      out += "\n";
      break;
    }
    case StmtKind::If:
      out += pad + "if " + exprString(k, s.value) + ":\n";
      for (StmtId b : s.body) stmtString(k, b, indent + 1, out);
      out += pad + "else:\n";
      for (StmtId b : s.orElse) stmtString(k, b, indent + 1, out);
      break;
  }
}

}  // namespace

std::string LoopKernel::toString() const {
  std::string out = "kernel " + name + "(";
  for (size_t i = 0; i < buffers.size(); ++i)
    out += (i ? ", " : "") + buffers[i].name + ": " + std::string(dtypeName(buffers[i].dtype)) +
           (buffers[i].output ? " out" : "");
  out += "):\n";
  if (body >= 0) stmtString(*this, body, 1, out);
  return out;
}

namespace {
bool hostScalar(DType t) { return !isFloat(t); }
}  // namespace

bool hostEvaluable(const LoopKernel& k, ExprId e, const std::vector<int32_t>& vars) {
  const ExprNode& n = k.expr(e);
  if (!hostScalar(n.type)) return false;
  switch (n.kind) {
    case ExprKind::IntConst:
    case ExprKind::Dim: return true;
    case ExprKind::Var: return std::find(vars.begin(), vars.end(), n.a) != vars.end();
    case ExprKind::Unary: return n.op == static_cast<uint8_t>(UnaryOp::Not) && hostEvaluable(k, n.a, vars);
    case ExprKind::Binary:
      return static_cast<BinaryOp>(n.op) != BinaryOp::Pow && hostScalar(k.expr(n.a).type) && hostEvaluable(k, n.a, vars) &&
             hostEvaluable(k, n.b, vars);
    case ExprKind::Select: return hostEvaluable(k, n.a, vars) && hostEvaluable(k, n.b, vars) && hostEvaluable(k, n.c, vars);
    case ExprKind::Cast: return hostScalar(k.expr(n.a).type) && hostEvaluable(k, n.a, vars);
    default: return false;
  }
}

std::optional<int64_t> evalOnHost(const LoopKernel& k, ExprId e, const int64_t* shapes,
                                  const std::unordered_map<int32_t, int64_t>& vars) {
  const ExprNode& n = k.expr(e);
  if (!hostScalar(n.type)) return std::nullopt;
  // Wrap to the expression's width, as the kernel computes it.
  auto wrap = [&](int64_t v) -> int64_t {
    switch (n.type) {
      case DType::Bool: return v != 0;
      case DType::Int8: return static_cast<int8_t>(v);
      case DType::UInt8: return static_cast<uint8_t>(v);
      case DType::UInt16: return static_cast<uint16_t>(v);
      case DType::Int16: return static_cast<int16_t>(v);
      case DType::Int32: return static_cast<int32_t>(v);
      default: return v;
    }
  };
  switch (n.kind) {
    case ExprKind::IntConst: return n.ival;
    case ExprKind::Dim: return shapes[n.ival];
    case ExprKind::Var: {
      auto it = vars.find(n.a);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    }
    case ExprKind::Unary: {
      if (static_cast<UnaryOp>(n.op) != UnaryOp::Not) return std::nullopt;
      auto a = evalOnHost(k, n.a, shapes, vars);
      if (!a) return std::nullopt;
      return wrap(n.type == DType::Bool ? !*a : ~*a);
    }
    case ExprKind::Select: {
      auto c = evalOnHost(k, n.a, shapes, vars);
      if (!c) return std::nullopt;
      return evalOnHost(k, *c ? n.b : n.c, shapes, vars);
    }
    case ExprKind::Cast: {
      auto a = evalOnHost(k, n.a, shapes, vars);
      if (!a) return std::nullopt;
      return wrap(*a);
    }
    case ExprKind::Binary: {
      if (!hostScalar(k.expr(n.a).type)) return std::nullopt;
      auto a = evalOnHost(k, n.a, shapes, vars);
      auto b = evalOnHost(k, n.b, shapes, vars);
      if (!a || !b) return std::nullopt;
      int64_t x = *a, y = *b;
      bool uns = isUnsignedInt(k.expr(n.a).type) || k.expr(n.a).type == DType::Bool;
      // The kernels' integer division never traps: by 0 gives 0, by -1 negates.
      auto divide = [&](bool floor) -> int64_t {
        if (y == 0) return 0;
        if (y == -1 && !uns) return static_cast<int64_t>(0ull - static_cast<uint64_t>(x));
        int64_t q = x / y;
        if (floor && (x % y != 0) && ((x < 0) != (y < 0))) --q;
        return q;
      };
      auto remainder = [&](bool floor) -> int64_t {
        if (y == 0 || y == -1) return 0;
        int64_t r = x % y;
        if (floor && r != 0 && ((r < 0) != (y < 0))) r += y;
        return r;
      };
      uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
      switch (static_cast<BinaryOp>(n.op)) {
        case BinaryOp::Add: return wrap(static_cast<int64_t>(ux + uy));
        case BinaryOp::Sub: return wrap(static_cast<int64_t>(ux - uy));
        case BinaryOp::Mul: return wrap(static_cast<int64_t>(ux * uy));
        case BinaryOp::Div: return wrap(divide(false));
        case BinaryOp::FloorDiv: return wrap(divide(true));
        case BinaryOp::Mod: return wrap(remainder(false));
        case BinaryOp::FloorMod: return wrap(remainder(true));
        case BinaryOp::Max: return uns ? static_cast<int64_t>(std::max(ux, uy)) : std::max(x, y);
        case BinaryOp::Min: return uns ? static_cast<int64_t>(std::min(ux, uy)) : std::min(x, y);
        case BinaryOp::Eq: return x == y;
        case BinaryOp::Ne: return x != y;
        case BinaryOp::Lt: return uns ? ux < uy : x < y;
        case BinaryOp::Le: return uns ? ux <= uy : x <= y;
        case BinaryOp::Gt: return uns ? ux > uy : x > y;
        case BinaryOp::Ge: return uns ? ux >= uy : x >= y;
        case BinaryOp::And: return wrap(x & y);
        case BinaryOp::Or: return wrap(x | y);
        case BinaryOp::Pow: return std::nullopt;
      }
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

}  // namespace kiln::loop
