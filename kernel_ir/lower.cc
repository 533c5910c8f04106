// FusedFunction -> LoopKernel by inlining compute rules.
#include "kernel_ir/lower.h"

#include "kernel_ir/border_split.h"
#include "kernel_ir/range_fold.h"

#include <array>
#include <map>
#include <span>
#include <unordered_map>

#include "kiln/error.h"
#include "kernel_ir/compute.h"
#include "kernel_ir/shape_util.h"

namespace kiln::kernel_ir {

using loop::ExprId;

std::vector<int32_t> shapeSlots(const FusedFunction& f, int32_t* total) {
  std::vector<int32_t> slots(f.numValues());
  int32_t at = 0;
  for (size_t v = 0; v < slots.size(); ++v) {
    slots[v] = at;
    at += static_cast<int32_t>(f.typeOf(static_cast<int32_t>(v)).rank());
  }
  if (total) *total = at;
  return slots;
}

namespace {

class Lowering {
 public:
  Lowering(const FusedFunction& f, loop::LoopKernel& k, const LowerOptions& options)
      : f_(f), k_(k), b_(k), options_(options) {
    slots_ = shapeSlots(f, &k.numShapeSlots);
    parent_.resize(static_cast<size_t>(k.numShapeSlots));
    for (size_t i = 0; i < parent_.size(); ++i) parent_[i] = static_cast<int32_t>(i);
    equateDims();
  }

  void run() {
    k_.name = f_.name;
    bufferOf_.assign(f_.numValues(), -1);
    for (size_t p = 0; p < f_.params.size(); ++p) {
      bufferOf_[p] = static_cast<int32_t>(k_.buffers.size());
      k_.buffers.push_back({f_.params[p].dtype, false, "in" + std::to_string(p)});
    }
    std::vector<int32_t> outBuffers;
    for (size_t o = 0; o < f_.outputs.size(); ++o) {
      outBuffers.push_back(static_cast<int32_t>(k_.buffers.size()));
      k_.buffers.push_back({f_.typeOf(f_.outputs[o]).dtype, true, "out" + std::to_string(o)});
    }
    // Matrix products run first, through the GEMM microkernel, into their output
    // or a scratch buffer; everything after reads them like inputs.
    std::vector<loop::StmtId> gemms = lowerGemms(outBuffers);
    if (softmaxRows(outBuffers)) return;
    // The fast version assumes no `?` dimension broadcasts (contiguous loads that
    // vectorize); if that needed any assumption, the general version is the fallback.
    std::vector<ExprId> guards;
    guards_ = &guards;
    std::vector<loop::StmtId> fast = outputNests(outBuffers);
    guards_ = nullptr;
    std::erase_if(guards, [&](ExprId g) { return b_.isIntConst(g); });  // provably true
    if (guards.empty()) {
      gemms.insert(gemms.end(), fast.begin(), fast.end());
      k_.body = b_.block(std::move(gemms));
      return;
    }
    memo_.clear();
    // The general version runs only when a `?` dimension broadcasts at run time:
    // plain loops keep its compile time low.
    generalVersion_ = true;
    std::vector<loop::StmtId> general = outputNests(outBuffers);
    ExprId all = guards[0];
    for (size_t i = 1; i < guards.size(); ++i) all = b_.binary(loop::BinaryOp::And, all, guards[i]);
    gemms.push_back(b_.ifThenElse(all, std::move(fast), std::move(general)));
    k_.body = b_.block(std::move(gemms));
  }

 private:
  // ---- run-time dimensions known to be equal ----
  int32_t find(int32_t s) {
    while (parent_[static_cast<size_t>(s)] != s) s = parent_[static_cast<size_t>(s)] = parent_[static_cast<size_t>(parent_[static_cast<size_t>(s)])];
    return s;
  }
  int32_t slotOf(int32_t value, size_t d) { return slots_[static_cast<size_t>(value)] + static_cast<int32_t>(d); }

  // Element-wise and broadcasting operators: a `?` result dimension equals the
  // operands' dimensions when every operand that could set it (covers it, not a
  // static 1) has the same run-time extent. Such dimensions share one slot, so
  // the guards that compare them fold away.
  void equateDims() {
    for (size_t i = 0; i < f_.nodes.size(); ++i) {
      const FusedNode& n = f_.nodes[i];
      if (n.isConstant() || n.op->pattern > ops::OpPattern::Broadcast || n.op->name == "expand_dims") continue;
      int32_t value = static_cast<int32_t>(f_.params.size() + i);
      size_t outRank = n.type.rank();
      for (size_t od = 0; od < outRank; ++od) {
        if (n.type.shape[od] != ops::kAnyDim) continue;
        int32_t cls = -1;
        bool same = true;
        for (int32_t in : n.inputs) {
          const ops::TensorDesc& t = f_.typeOf(in);
          if (od < outRank - t.rank()) continue;
          size_t d = od - (outRank - t.rank());
          if (t.shape[d] == 1) continue;
          if (t.shape[d] != ops::kAnyDim) {
            same = false;
            break;
          }
          int32_t c = find(slotOf(in, d));
          if (cls >= 0 && c != cls) same = false;
          cls = c;
        }
        if (same && cls >= 0) parent_[static_cast<size_t>(find(slotOf(value, od)))] = cls;
      }
    }
  }

  ExprId dimOf(int32_t value, size_t d) {
    int64_t s = f_.typeOf(value).shape[d];
    if (s != ops::kAnyDim) return b_.intConst(s);
    return b_.dim(find(slotOf(value, d)));
  }

  // Row-major linear index of `index` into a value of that value's shape.
  ExprId linearIndex(int32_t value, std::span<const ExprId> index) {
    ExprId linear = b_.intConst(0), stride = b_.intConst(1);
    for (size_t d = index.size(); d-- > 0;) {
      linear = b_.add(linear, b_.mul(index[d], stride));
      stride = b_.mul(stride, dimOf(value, d));
    }
    return linear;
  }

  // A kernel that is one softmax over the last axis of an input: per row, write
  // exp(x - max) once, then scale the row by 1 / its sum (reading it back while it
  // is in cache), instead of evaluating exp twice per element. With
  // outputsWriteOnly, the row's sum of exponentials is a reduction of its own
  // and each result is stored once, scaled: exp twice per element, but the
  // output is never read, so its stores may go around the caches.
  bool softmaxRows(const std::vector<int32_t>& outBuffers) {
    if (f_.nodes.size() != 1 || f_.outputs.size() != 1) return false;
    const FusedNode& n = f_.nodes[0];
    if (n.isConstant() || n.op->name != "nn.softmax" || !isFloat(n.type.dtype) || n.type.dtype == DType::Float16) return false;
    size_t rank = n.type.rank();
    int64_t axis = ops::AttrReader(n.op->name, n.attrs).getInt("axis", -1);
    if (rank == 0 || (axis != -1 && axis != static_cast<int64_t>(rank) - 1)) return false;
    int32_t x = n.inputs[0], value = f_.outputs[0], out = outBuffers[0];
    DType t = n.type.dtype;
    // Rows: all leading dimensions flattened; columns: the last.
    int32_t vr = b_.newVar();
    ExprId rows = b_.intConst(1);
    for (size_t d = 0; d + 1 < rank; ++d) rows = b_.mul(rows, dimOf(value, d));
    ExprId cols = dimOf(value, rank - 1);
    ExprId base = b_.mul(b_.var(vr), cols);
    int32_t vm = b_.newVar(), ve = b_.newVar(), vs = b_.newVar(), vw = b_.newVar();
    int32_t xb = bufferOf_[static_cast<size_t>(x)];
    ExprId m = b_.reduce(loop::ReduceOp::Max, {vm}, {cols}, b_.load(xb, b_.add(base, b_.var(vm))));
    // x - max(x) is never above 0 (NaN where the row has one, or +inf twice).
    auto expAt = [&](int32_t v) {
      return b_.unary(loop::UnaryOp::ExpNonPositive, b_.binary(loop::BinaryOp::Sub, b_.load(xb, b_.add(base, b_.var(v))), m));
    };
    auto reciprocal = [&](ExprId x) { return b_.binary(loop::BinaryOp::Div, b_.floatConst(1.0, t), x); };
    std::vector<loop::StmtId> passes;
    if (options_.outputsWriteOnly) {
      ExprId inv = reciprocal(b_.reduce(loop::ReduceOp::Sum, {vs}, {cols}, expAt(vs)));
      passes.push_back(b_.forLoop(ve, cols, loop::LoopKind::Vectorized,
                                  {b_.store(out, b_.add(base, b_.var(ve)), b_.binary(loop::BinaryOp::Mul, expAt(ve), inv))}));
    } else {
      passes.push_back(b_.forLoop(ve, cols, loop::LoopKind::Vectorized, {b_.store(out, b_.add(base, b_.var(ve)), expAt(ve))}));
      ExprId inv = reciprocal(b_.reduce(loop::ReduceOp::Sum, {vs}, {cols}, b_.load(out, b_.add(base, b_.var(vs)))));
      ExprId scaled = b_.binary(loop::BinaryOp::Mul, b_.load(out, b_.add(base, b_.var(vw))), inv);
      passes.push_back(b_.forLoop(vw, cols, loop::LoopKind::Vectorized, {b_.store(out, b_.add(base, b_.var(vw)), scaled)}));
    }
    // The max pass waits on memory and the exponentials' pass on exp: fetching
    // the next row while computing this one overlaps the two.
    b_.prefetchAlong(passes.front(), xb, b_.add(base, cols));
    k_.body = b_.block({b_.forLoop(vr, rows, loop::LoopKind::Parallel, std::move(passes))});
    return true;
  }

  // An output a Gemm statement already wrote in place.
  bool writtenByGemm(size_t o, const std::vector<int32_t>& outBuffers) const {
    return bufferOf_[static_cast<size_t>(f_.outputs[o])] == outBuffers[o];
  }

  // ---- matrix products through the microkernel ----
  ExprId product(int32_t value, size_t from, size_t to) {
    ExprId p = b_.intConst(1);
    for (size_t d = from; d < to; ++d) p = b_.mul(p, dimOf(value, d));
    return p;
  }

  // float32 dense / matmul / batch_matmul whose operands are kernel inputs become
  // Gemm statements; so does a product whose data operand is a concatenation
  // (the only operand fusion inlines, see fuse_ops.cc), copied into scratch first.
  // The runtime's convolutions take NCHW data and OIHW weights; other layouts
  // take the generic lowering.
  static bool plainLayouts(const FusedNode& n) {
    ops::AttrReader attrs(n.op->name, n.attrs);
    return attrs.getString("data_layout", "NCHW") == "NCHW" && attrs.getString("kernel_layout", "OIHW") == "OIHW";
  }

  bool gemmable(const FusedNode& n) const {
    if (n.isConstant()) return false;
    const std::string& op = n.op->name;
    if (op != "nn.dense" && op != "nn.matmul" && op != "nn.batch_matmul" && op != "nn.conv2d") return false;
    if (n.type.dtype != DType::Float32) return false;
    if (op == "nn.conv2d" && !plainLayouts(n)) return false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int32_t in = n.inputs[i];
      if (f_.typeOf(in).dtype != DType::Float32) return false;
      bool copiedOperand = i == 0 && op != "nn.conv2d" && isConcatenation(in);
      if (!f_.isParam(in) && !copiedOperand) return false;
    }
    return true;
  }

  // The second convolution of a chained pair: as gemmable, but for its data
  // operand, the first's output.
  bool chainable(const FusedNode& n) const {
    if (n.isConstant() || n.op->name != "nn.conv2d" || n.type.dtype != DType::Float32 || !plainLayouts(n)) return false;
    return f_.isParam(n.inputs[1]) && f_.typeOf(n.inputs[1]).dtype == DType::Float32;
  }

  bool isConcatenation(int32_t value) const {
    if (f_.isParam(value)) return false;
    const FusedNode& n = f_.node(value);
    return !n.isConstant() && n.op->name == "concatenate";
  }

  // The concatenated data operand of a product, copied into a scratch buffer of
  // its shape (one copy nest per part) for the Gemm statement to read in place.
  loop::StmtId materialize(int32_t value) {
    int32_t buffer = static_cast<int32_t>(k_.buffers.size());
    k_.buffers.push_back({DType::Float32, true, "tmp" + std::to_string(value), value});
    loop::StmtId s = concatCopies(value, buffer);
    if (s < 0) {
      NestTarget whole{value, buffer, value};
      s = nest({&whole, 1}, static_cast<size_t>(-1), 0);
    }
    bufferOf_[static_cast<size_t>(value)] = buffer;
    return s;
  }

  std::vector<loop::StmtId> lowerGemms(const std::vector<int32_t>& outBuffers) {
    std::vector<loop::StmtId> stmts;
    // Chained convolutions (fuse_ops.cc): the second's value -> the first's, with
    // the first's epilogue. The pair is one statement, made at the second.
    std::unordered_map<int32_t, std::pair<int32_t, PostOps>> chained;
    std::vector<bool> firstOfPair(f_.nodes.size(), false);
    for (size_t i = 0; i < f_.nodes.size(); ++i) {
      const FusedNode& n = f_.nodes[i];
      int32_t value = static_cast<int32_t>(f_.params.size() + i);
      if (!gemmable(n) || n.op->name != "nn.conv2d") continue;
      int32_t next = -1;
      PostOps post = postOps(value, 1, &next);
      if (next < 0 || !chainable(f_.node(next))) continue;
      chained[next] = {value, post};
      firstOfPair[i] = true;
    }
    for (size_t i = 0; i < f_.nodes.size(); ++i) {
      const FusedNode& n = f_.nodes[i];
      int32_t value = static_cast<int32_t>(f_.params.size() + i);
      if (firstOfPair[i]) continue;
      if (auto pair = chained.find(value); pair != chained.end()) {
        stmts.push_back(convPair(pair->second.first, pair->second.second, value, outBuffers));
        continue;
      }
      if (!gemmable(n)) continue;
      PostOps post;
      bool output = outputBuffer(value, outBuffers) >= 0;
      if (!output && options_.directConv && n.op->name == "nn.conv2d") post = postOps(value, 1);
      // A dense layer's bias and ReLU, applied by the product as it finishes C.
      if (!output && options_.gemmPostOps && n.op->name == "nn.dense") post = postOps(value, static_cast<int64_t>(f_.typeOf(value).rank()) - 1);
      int32_t target = resultBuffer(value, post, outBuffers);
      int32_t a = n.inputs[0], bv = n.inputs[1];
      if (!f_.isParam(a)) stmts.push_back(materialize(a));
      ops::AttrReader attrs(n.op->name, n.attrs);
      loop::GemmArgs g;
      g.a = bufferOf_[static_cast<size_t>(a)];
      g.b = bufferOf_[static_cast<size_t>(bv)];
      g.c = target;
      g.aOffset = g.bOffset = g.cOffset = b_.intConst(0);
      size_t ra = f_.typeOf(a).rank();
      if (n.op->name == "nn.conv2d") {
        if (!options_.directConv) {
          stmts.push_back(lowerConv2d(n, value, a, bv, target));
          continue;
        }
        loop::Conv2dArgs c = directConv2d(n, value, a, bv, target);
        if (post.bias >= 0) c.bias = bufferOf_[static_cast<size_t>(post.bias)];
        c.relu = post.relu;
        stmts.push_back(b_.conv2d(c));
        continue;
      }
      if (n.op->name == "nn.dense") {
        // x[..., K] * w[N, K]^T: the leading dimensions of x are rows.
        g.m = product(a, 0, ra - 1);
        g.k = dimOf(a, ra - 1);
        g.n = dimOf(bv, 0);
        g.lda = g.k;
        g.ldb = g.k;
        g.ldc = g.n;
        g.transB = true;
        g.packedB = preparedOperand(bv, true);
        if (post.bias >= 0) g.bias = bufferOf_[static_cast<size_t>(post.bias)];
        g.relu = post.relu;
        stmts.push_back(b_.gemm(g));
      } else if (n.op->name == "nn.matmul") {
        g.transA = attrs.getBool("transpose_a", false);
        g.transB = attrs.getBool("transpose_b", false);
        g.m = g.transA ? dimOf(a, ra - 1) : product(a, 0, ra - 1);
        g.k = g.transA ? dimOf(a, ra - 2) : dimOf(a, ra - 1);
        g.n = g.transB ? dimOf(bv, 0) : dimOf(bv, 1);
        g.lda = dimOf(a, ra - 1);
        g.ldb = dimOf(bv, 1);
        g.ldc = g.n;
        if (f_.typeOf(bv).rank() == 2) g.packedB = preparedOperand(bv, g.transB);
        stmts.push_back(b_.gemm(g));
      } else {
        // One product per batch; an operand with batch 1 is shared by every batch.
        g.transA = attrs.getBool("transpose_a", false);
        g.transB = attrs.getBool("transpose_b", true);
        g.m = g.transA ? dimOf(a, 2) : dimOf(a, 1);
        g.k = g.transA ? dimOf(a, 1) : dimOf(a, 2);
        g.n = g.transB ? dimOf(bv, 1) : dimOf(bv, 2);
        g.lda = dimOf(a, 2);
        g.ldb = dimOf(bv, 2);
        g.ldc = g.n;
        int32_t q = b_.newVar();
        ExprId qv = b_.var(q);
        auto batchOffset = [&](int32_t v) {
          ExprId stride = b_.mul(dimOf(v, 1), dimOf(v, 2));
          ExprId one = b_.binary(loop::BinaryOp::Eq, dimOf(v, 0), b_.intConst(1));
          return b_.select(one, b_.intConst(0), b_.mul(qv, stride));
        };
        g.aOffset = batchOffset(a);
        g.bOffset = batchOffset(bv);
        g.cOffset = b_.mul(qv, b_.mul(g.m, g.n));
        stmts.push_back(b_.forLoop(q, dimOf(value, 0), loop::LoopKind::Serial, {b_.gemm(g)}));
      }
    }
    return stmts;
  }

  // A buffer for the prepacked form of B operand `param` (2-D, read whole by
  // its GEMM), which a caller passes when `param` is a constant it has packed.
  int32_t preparedOperand(int32_t param, bool transB) {
    return preparedBuffer(param, loop::PreparedLayout::GemmB, transB ? 1 : 0);
  }

  int32_t preparedBuffer(int32_t param, loop::PreparedLayout layout, int64_t layoutParam) {
    int32_t buffer = static_cast<int32_t>(k_.buffers.size());
    loop::BufferDecl decl{DType::Float32, false, "packed" + std::to_string(param)};
    decl.preparedFrom = bufferOf_[static_cast<size_t>(param)];
    decl.preparedLayout = layout;
    decl.preparedParam = layoutParam;
    k_.buffers.push_back(std::move(decl));
    return buffer;
  }

  // A dimension as a scratch-size factor: the constant, or its shape slot as -(slot + 1).
  int64_t sizeFactor(int32_t value, size_t d) {
    int64_t s = f_.typeOf(value).shape[d];
    return s != ops::kAnyDim ? s : -(static_cast<int64_t>(find(slotOf(value, d))) + 1);
  }

  // An epilogue the convolution or product applies itself (jit::ConvPostOps,
  // jit::GemmPost): `nn.relu(nn.bias_add(x, %b))`, `nn.bias_add(x, %b)` or
  // `nn.relu(x)`, with %b a float32 input of one value along `biasAxis` (a
  // convolution's channel, a dense layer's unit), each step the only use of the
  // one before, ending in a kernel output that nothing else reads. `end` is that
  // output's value (-1: no match, the epilogue is a loop nest as usual).
  struct PostOps {
    int32_t end = -1, bias = -1;
    bool relu = false;
  };
  // With `chainTo`, the epilogue of the first of two chained convolutions
  // (fuse_ops.cc): it ends in the second's data operand instead, whose value is
  // set there (-1: no match).
  PostOps postOps(int32_t value, int64_t biasAxis, int32_t* chainTo = nullptr) const {
    std::vector<int32_t> uses(f_.numValues(), 0), user(f_.numValues(), -1);
    for (size_t i = 0; i < f_.nodes.size(); ++i)
      for (int32_t in : f_.nodes[i].inputs) {
        ++uses[static_cast<size_t>(in)];
        user[static_cast<size_t>(in)] = static_cast<int32_t>(f_.params.size() + i);
      }
    int32_t outputs = 0;
    PostOps post;
    int32_t v = value;
    auto nextOp = [&](const char* name) -> const FusedNode* {
      if (uses[static_cast<size_t>(v)] != 1) return nullptr;
      int32_t u = user[static_cast<size_t>(v)];
      const FusedNode& n = f_.node(u);
      return !n.isConstant() && n.op->name == name && n.inputs[0] == v ? &n : nullptr;
    };
    if (const FusedNode* add = nextOp("nn.bias_add")) {
      int32_t b = add->inputs[1];
      const ops::TensorDesc& bt = f_.typeOf(b);
      int64_t rank = static_cast<int64_t>(f_.typeOf(value).rank());
      int64_t axis = ops::AttrReader("nn.bias_add", add->attrs).getInt("axis", 1);
      if (axis < 0) axis += rank;
      if (!f_.isParam(b) || bt.dtype != DType::Float32 || bt.rank() != 1 || axis != biasAxis) return {};
      post.bias = b;
      v = user[static_cast<size_t>(v)];
    }
    if (nextOp("nn.relu")) {
      post.relu = true;
      v = user[static_cast<size_t>(v)];
    }
    for (int32_t o : f_.outputs) outputs += o == v;
    if (f_.typeOf(v).dtype != DType::Float32) return {};
    if (chainTo) {
      // Chained: the only use of the end is as the data of a convolution.
      *chainTo = -1;
      if (outputs != 0 || uses[static_cast<size_t>(v)] != 1) return {};
      int32_t u = user[static_cast<size_t>(v)];
      const FusedNode& n = f_.node(u);
      if (n.isConstant() || n.op->name != "nn.conv2d" || n.inputs[0] != v) return {};
      *chainTo = u;
      post.end = v;
      return post;
    }
    if (v == value || uses[static_cast<size_t>(v)] != 0 || outputs != 1) return {};
    post.end = v;
    return post;
  }

  // conv2d (NCHW, OIHW) as one call of the runtime's direct convolution.
  loop::Conv2dArgs directConv2d(const FusedNode& n, int32_t value, int32_t x, int32_t w, int32_t target) {
    ops::AttrReader attrs(n.op->name, n.attrs);
    ops::Window2d win = ops::windowAttrs(attrs);
    loop::Conv2dArgs c;
    c.x = bufferOf_[static_cast<size_t>(x)];
    c.w = bufferOf_[static_cast<size_t>(w)];
    c.out = target;
    auto k = [&](int64_t v) { return b_.intConst(v); };
    c.dims = {dimOf(x, 0),          dimOf(x, 1),          dimOf(x, 2),          dimOf(x, 3),
              dimOf(w, 0),          dimOf(w, 2),          dimOf(w, 3),          dimOf(value, 2),
              dimOf(value, 3),      k(win.strides[0]),    k(win.strides[1]),    k(win.pad[0]),
              k(win.pad[1]),        k(win.dilation[0]),   k(win.dilation[1]),   k(attrs.getInt("groups", 1))};
    int64_t groups = attrs.getInt("groups", 1);
    int64_t stride = loop::winogradStride(win.strides[0], win.strides[1], win.dilation[0], win.dilation[1], groups);
    c.packedW = preparedBuffer(w, loop::PreparedLayout::ConvFilter, groups | stride << loop::kConvFilterWinogradShift);
    return c;
  }

  // The kernel output buffer `value` is, or -1.
  int32_t outputBuffer(int32_t value, const std::vector<int32_t>& outBuffers) const {
    for (size_t o = 0; o < f_.outputs.size(); ++o)
      if (f_.outputs[o] == value) return outBuffers[o];
    return -1;
  }

  // Where a product or convolution stores `value`: the kernel output it is, or
  // the output its epilogue `post` ends in when the runtime applies it (no
  // nest stores that output), or a scratch value of its shape.
  int32_t resultBuffer(int32_t value, const PostOps& post, const std::vector<int32_t>& outBuffers) {
    int32_t target = outputBuffer(value, outBuffers);
    if (post.end >= 0) {
      target = outputBuffer(post.end, outBuffers);
      bufferOf_[static_cast<size_t>(post.end)] = target;
    }
    if (target < 0) {
      target = static_cast<int32_t>(k_.buffers.size());
      k_.buffers.push_back({DType::Float32, true, "tmp" + std::to_string(value), value});
    }
    bufferOf_[static_cast<size_t>(value)] = target;
    return target;
  }

  // Two chained convolutions as one statement (jit::sconv2dPair): `first`
  // with its epilogue `post1` feeds `second`, whose own epilogue, if the
  // runtime applies it, ends in the kernel's output.
  loop::StmtId convPair(int32_t first, const PostOps& post1, int32_t second, const std::vector<int32_t>& outBuffers) {
    const FusedNode& n1 = f_.node(first);
    const FusedNode& n2 = f_.node(second);
    // The first's output, where the runtime runs the pair as two calls.
    int32_t between = static_cast<int32_t>(k_.buffers.size());
    k_.buffers.push_back({DType::Float32, true, "tmp" + std::to_string(post1.end), post1.end});
    bufferOf_[static_cast<size_t>(post1.end)] = between;
    bufferOf_[static_cast<size_t>(first)] = between;
    PostOps post2 = outputBuffer(second, outBuffers) < 0 ? postOps(second, 1) : PostOps{};
    int32_t target = resultBuffer(second, post2, outBuffers);
    loop::Conv2dArgs c = directConv2d(n1, first, n1.inputs[0], n1.inputs[1], target);
    if (post1.bias >= 0) c.bias = bufferOf_[static_cast<size_t>(post1.bias)];
    c.relu = post1.relu;
    loop::Conv2dArgs c2 = directConv2d(n2, second, n2.inputs[0], n2.inputs[1], target);
    c.next.w = c2.w;
    c.next.packedW = c2.packedW;
    c.next.dims = c2.dims;
    c.next.between = between;
    if (post2.bias >= 0) c.next.bias = bufferOf_[static_cast<size_t>(post2.bias)];
    c.next.relu = post2.relu;
    return b_.conv2d(c);
  }

  // conv2d (NCHW, OIHW) as im2col + GEMM: for each image and group, the input
  // windows are unfolded into col[(c, kh, kw), (oh, ow)], then
  // out[n, group's channels] = W[group] (Og x Cg*KH*KW) * col.
  loop::StmtId lowerConv2d(const FusedNode& n, int32_t value, int32_t x, int32_t w, int32_t target) {
    ops::AttrReader attrs(n.op->name, n.attrs);
    ops::Window2d win = ops::windowAttrs(attrs);
    const auto& stride = win.strides;
    const auto& dil = win.dilation;
    std::array<int64_t, 2> pad{win.pad[0], win.pad[1]};  // top and left: bottom/right only shape the output
    int64_t groups = attrs.getInt("groups", 1);
    int64_t kh = f_.typeOf(w).shape[2], kw = f_.typeOf(w).shape[3];

    int32_t col = static_cast<int32_t>(k_.buffers.size());
    k_.buffers.push_back({DType::Float32, true, "col" + std::to_string(value), -1,
                          {sizeFactor(w, 1), kh, kw, sizeFactor(value, 2), sizeFactor(value, 3)}});
    ExprId cg = dimOf(w, 1), og = b_.binary(loop::BinaryOp::Div, dimOf(w, 0), b_.intConst(groups));
    ExprId ohExt = dimOf(value, 2), owExt = dimOf(value, 3);
    ExprId ohw = b_.mul(ohExt, owExt);
    ExprId kdim = b_.mul(cg, b_.intConst(kh * kw));

    int32_t vn = b_.newVar(), vg = b_.newVar();
    ExprId in = b_.var(vn), ig = b_.var(vg);
    // im2col: c, kh, kw, oh outer; each output row splits into [0, lo) zeros,
    // [lo, hi) a plain (vectorizable) copy where the window is inside the image,
    // and [hi, OW) zeros, so the copy needs no per-element bounds test.
    using loop::BinaryOp;
    int32_t vc = b_.newVar(), vkh = b_.newVar(), vkw = b_.newVar(), voh = b_.newVar();
    ExprId ic = b_.var(vc), ikh = b_.var(vkh), ikw = b_.var(vkw), ioh = b_.var(voh);
    ExprId ih = b_.binary(BinaryOp::Sub, b_.add(b_.mul(ioh, b_.intConst(stride[0])), b_.mul(ikh, b_.intConst(dil[0]))),
                          b_.intConst(pad[0]));
    ExprId rowOk = b_.binary(BinaryOp::And, b_.binary(BinaryOp::Ge, ih, b_.intConst(0)),
                             b_.binary(BinaryOp::Lt, ih, dimOf(x, 2)));
    // iw = ow * s - pad + kw * d lies in [0, W) exactly for ow in [lo, hi).
    ExprId shift = b_.binary(BinaryOp::Sub, b_.intConst(pad[1]), b_.mul(ikw, b_.intConst(dil[1])));
    auto ceilDiv = [&](ExprId a) {
      return b_.binary(BinaryOp::FloorDiv, b_.add(a, b_.intConst(stride[1] - 1)), b_.intConst(stride[1]));
    };
    auto clampTo = [&](ExprId v, ExprId lo, ExprId hi) {
      return b_.binary(BinaryOp::Min, b_.binary(BinaryOp::Max, v, lo), hi);
    };
    ExprId lo = clampTo(ceilDiv(shift), b_.intConst(0), owExt);
    ExprId hi = clampTo(ceilDiv(b_.add(dimOf(x, 3), shift)), lo, owExt);
    lo = b_.select(rowOk, lo, owExt);  // a row outside the image is all zeros
    hi = b_.select(rowOk, hi, owExt);
    ExprId channel = b_.add(b_.mul(ig, cg), ic);
    ExprId row = b_.add(b_.mul(b_.add(b_.mul(ic, b_.intConst(kh)), ikh), b_.intConst(kw)), ikw);
    ExprId rowBase = b_.add(b_.mul(row, ohw), b_.mul(ioh, owExt));
    ExprId zero = b_.floatConst(0.0);
    int32_t v0 = b_.newVar(), v1 = b_.newVar(), v2 = b_.newVar();
    loop::StmtId head = b_.forLoop(v0, lo, loop::LoopKind::Vectorized, {b_.store(col, b_.add(rowBase, b_.var(v0)), zero)});
    ExprId ow = b_.add(lo, b_.var(v1));
    ExprId iw = b_.binary(BinaryOp::Sub, b_.mul(ow, b_.intConst(stride[1])), shift);
    std::vector<ExprId> xi{in, channel, ih, iw};
    loop::StmtId body = b_.forLoop(v1, b_.binary(BinaryOp::Sub, hi, lo), loop::LoopKind::Vectorized,
                                   {b_.store(col, b_.add(rowBase, ow), b_.load(bufferOf_[static_cast<size_t>(x)], linearIndex(x, xi)))});
    loop::StmtId tail = b_.forLoop(v2, b_.binary(BinaryOp::Sub, owExt, hi), loop::LoopKind::Vectorized,
                                   {b_.store(col, b_.add(rowBase, b_.add(hi, b_.var(v2))), zero)});
    // Channels of the unfold are independent: shared out over the pool.
    loop::StmtId unfold = b_.forLoop(
        vc, cg, loop::LoopKind::Parallel,
        {b_.forLoop(vkh, b_.intConst(kh), loop::LoopKind::Serial,
                    {b_.forLoop(vkw, b_.intConst(kw), loop::LoopKind::Serial,
                                {b_.forLoop(voh, ohExt, loop::LoopKind::Serial, {head, body, tail})})})});
    loop::GemmArgs g;
    g.a = bufferOf_[static_cast<size_t>(w)];
    g.b = col;
    g.c = target;
    g.m = og;
    g.n = ohw;
    g.k = kdim;
    g.lda = kdim;
    g.ldb = ohw;
    g.ldc = ohw;
    g.aOffset = b_.mul(b_.mul(ig, og), kdim);
    g.bOffset = b_.intConst(0);
    g.cOffset = b_.mul(b_.add(b_.mul(in, dimOf(w, 0)), b_.mul(ig, og)), ohw);
    loop::StmtId perGroup = b_.forLoop(vg, b_.intConst(groups), loop::LoopKind::Serial, {unfold, b_.gemm(g)});
    return b_.forLoop(vn, dimOf(x, 0), loop::LoopKind::Serial, {perGroup});
  }

  // The value's element at `index`, inlining operators down to parameter loads.
  ExprId valueAt(int32_t value, std::span<const ExprId> index) {
    if (f_.isParam(value) || bufferOf_[static_cast<size_t>(value)] >= 0)
      return b_.load(bufferOf_[static_cast<size_t>(value)], linearIndex(value, index));
    auto key = std::make_pair(value, std::vector<ExprId>(index.begin(), index.end()));
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;

    const FusedNode& n = f_.node(value);
    if (n.isConstant()) {
      DType t = n.type.dtype;
      return isFloat(t) ? b_.floatConst(n.floatValue, t) : b_.intConst(n.intValue, t);
    }
    if (!n.op->compute)
      throw Error("kernel " + f_.name + ": operator '" + n.op->name + "' has no loop lowering yet");
    std::vector<ops::TensorDesc> operands;
    for (int32_t in : n.inputs) operands.push_back(f_.typeOf(in));
    ops::ComputeCall call{*n.op,
                          ops::AttrReader(n.op->name, n.attrs),
                          operands,
                          n.type,
                          b_,
                          index,
                          n.field,
                          [&](size_t k, std::span<const ExprId> idx) { return valueAt(n.inputs[k], idx); },
                          [&](size_t k, size_t d) { return dimOf(n.inputs[k], d); },
                          [&](size_t d) { return dimOf(value, d); },
                          guards_};
    ExprId e;
    try {
      e = n.op->compute(call);
    } catch (const ops::OpError& err) {
      throw Error("kernel " + f_.name + ": " + err.what());
    }
    memo_.emplace(std::move(key), e);
    return e;
  }

  // The loop nests storing the outputs the GEMMs did not write. Consecutive
  // outputs over the same iteration space (a split's parts, an LSTM gate's
  // results) share one nest, each storing its element in the same iteration:
  // one parallel loop instead of one per output, both when compiling (a single
  // vectorized loop body) and when running (one dispatch to the pool). Safe
  // because a nest never loads what another output nest stores: outputs are
  // computed from inputs and GEMM results alone, every value inlined.
  std::vector<loop::StmtId> outputNests(const std::vector<int32_t>& outBuffers) {
    std::vector<loop::StmtId> nests;
    std::vector<NestTarget> group;
    auto flush = [&] {
      if (!group.empty()) nests.push_back(nest(group, static_cast<size_t>(-1), 0));
      group.clear();
    };
    for (size_t o = 0; o < f_.outputs.size(); ++o) {
      if (writtenByGemm(o, outBuffers)) continue;
      int32_t value = f_.outputs[o];
      if (loop::StmtId s = concatCopies(value, outBuffers[o]); s >= 0) {
        flush();
        nests.push_back(s);
        continue;
      }
      if (!group.empty() && !sameIterationSpace(group.front().over, value)) flush();
      group.push_back({value, outBuffers[o], value});
    }
    flush();
    return nests;
  }

  bool sameIterationSpace(int32_t a, int32_t b) {
    size_t rank = f_.typeOf(a).rank();
    if (f_.typeOf(b).rank() != rank) return false;
    for (size_t d = 0; d < rank; ++d)  // hash-consed: equal extents are the same expression
      if (dimOf(a, d) != dimOf(b, d)) return false;
    return true;
  }

  // A concatenation that is a kernel output, with static extents along its
  // axis: one copy nest per input into its range of the output (plain loads and
  // stores), instead of one nest whose every element selects its input (which
  // vectorizes into gathers). -1 when it does not apply.
  loop::StmtId concatCopies(int32_t value, int32_t buffer) {
    if (f_.isParam(value) || generalVersion_) return -1;
    const FusedNode& n = f_.node(value);
    if (n.isConstant() || n.op->name != "concatenate") return -1;
    size_t rank = n.type.rank();
    int64_t axis = ops::AttrReader(n.op->name, n.attrs).getInt("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(rank);
    if (axis < 0 || static_cast<size_t>(axis) >= rank) return -1;
    for (int32_t in : n.inputs)
      if (f_.typeOf(in).rank() != rank || f_.typeOf(in).shape[static_cast<size_t>(axis)] == ops::kAnyDim) return -1;
    std::vector<loop::StmtId> copies;
    int64_t offset = 0;
    for (int32_t in : n.inputs) {
      NestTarget copy{in, buffer, value};
      copies.push_back(nest({&copy, 1}, static_cast<size_t>(axis), offset));
      offset += f_.typeOf(in).shape[static_cast<size_t>(axis)];
    }
    return b_.block(std::move(copies));
  }

  // What a loop nest stores: the elements of `over` into `buffer`, laid out as
  // `value` (the same shape as `over`, except that along the nest's `axis` the
  // store lands `offset` further on).
  struct NestTarget {
    int32_t over, buffer, value;
  };

  // A loop nest over the dimensions of the targets' `over` (all of one
  // iteration space) storing each target's element in every iteration.
  loop::StmtId nest(std::span<const NestTarget> targets, size_t axis, int64_t offset) {
    int32_t over = targets.front().over;
    const ops::TensorDesc& t = f_.typeOf(over);
    size_t rank = t.rank();
    std::vector<int32_t> vars(rank);
    std::vector<ExprId> index(rank);
    // Leading dimensions of static extent 1 (a batch of one) get no loop: the
    // outermost loop, the one shared out over the pool, is then a real one.
    size_t first = 0;
    while (first + 1 < rank && t.shape[first] == 1) index[first++] = b_.intConst(0);
    for (size_t d = first; d < rank; ++d) {
      vars[d] = b_.newVar();
      index[d] = b_.var(vars[d]);
    }
    std::vector<loop::StmtId> stores;
    for (const NestTarget& target : targets) {
      const ops::TensorDesc& out = f_.typeOf(target.value);
      ExprId v = valueAt(target.over, index);
      if (b_.typeOf(v) != (out.dtype == DType::Float16 ? DType::Float32 : out.dtype)) v = b_.cast(out.dtype, v);
      std::vector<ExprId> at = index;
      if (axis < rank) at[axis] = b_.add(at[axis], b_.intConst(offset));
      stores.push_back(b_.store(target.buffer, linearIndex(target.value, at), v));
    }
    loop::StmtId s = stores.size() == 1 ? stores.front() : b_.block(std::move(stores));
    for (size_t d = rank; d-- > first;) {
      bool vectorize = d + 1 == rank && !generalVersion_;
      loop::LoopKind kind = d == first ? (vectorize ? loop::LoopKind::ParallelVectorized : loop::LoopKind::Parallel)
                                       : (vectorize ? loop::LoopKind::Vectorized : loop::LoopKind::Serial);
      s = b_.forLoop(vars[d], dimOf(over, d), kind, {s});
    }
    return s;
  }

  const FusedFunction& f_;
  loop::LoopKernel& k_;
  loop::LoopBuilder b_;
  LowerOptions options_;
  std::vector<int32_t> slots_;
  std::vector<int32_t> parent_;  // union-find over shape slots
  std::vector<int32_t> bufferOf_;
  std::map<std::pair<int32_t, std::vector<ExprId>>, ExprId> memo_;
  std::vector<ExprId>* guards_ = nullptr;  // set while building the fast version
  bool generalVersion_ = false;
};

}  // namespace

loop::LoopKernel lowerToLoops(const FusedFunction& f, const LowerOptions& options) {
  loop::LoopKernel k;
  Lowering(f, k, options).run();
  if (options.splitBorders) loop::splitBorders(k);
  loop::foldByRanges(k);
  return k;
}

}  // namespace kiln::kernel_ir
