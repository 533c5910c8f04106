// Neural-network operators: bias_add, softmax, layer_norm, batch_norm, conv2d and pooling (NCHW).
#include <array>
#include <climits>
#include <cmath>

#include "kernel_ir/compute.h"
#include "ops/registry.h"
#include "kernel_ir/shape_util.h"

namespace kiln::ops {
namespace {

std::vector<TensorDesc> biasAddRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  const TensorDesc& b = call.inputs[1];
  requireSameDType(call, x, b);
  requireRank(call, b, 1, "bias");
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 1), x.rank());
  if (!dimsCompatible(x.shape[axis], b.shape[0]))
    opFail(call, "bias has " + dimToString(b.shape[0]) + " elements but axis " + std::to_string(axis) +
                     " of the data has " + dimToString(x.shape[axis]));
  return {x};
}

std::vector<TensorDesc> softmaxRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireDType(call, x, DTypeClass::Float, "operand");
  normalizeAxis(call, call.attrs.getInt("axis", -1), x.rank());
  return {x};
}

std::vector<TensorDesc> layerNormRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireDType(call, x, DTypeClass::Float, "data");
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", -1), x.rank());
  call.attrs.getFloat("epsilon", 1e-5);
  call.attrs.getBool("center", true);
  call.attrs.getBool("scale", true);
  for (int k = 1; k < 3; ++k) {
    const TensorDesc& p = call.inputs[k];
    const char* name = k == 1 ? "gamma" : "beta";
    requireSameDType(call, x, p);
    requireRank(call, p, 1, name);
    if (!dimsCompatible(p.shape[0], x.shape[axis]))
      opFail(call, std::string(name) + " has " + dimToString(p.shape[0]) + " elements but the normalized axis has " +
                       dimToString(x.shape[axis]));
  }
  return {x};
}

int64_t windowOut(const OpCall& call, int64_t in, int64_t padLo, int64_t padHi, int64_t window, int64_t stride,
                  int64_t dilation, bool ceilMode) {
  if (in == kAnyDim) return kAnyDim;
  int64_t span = dilation * (window - 1) + 1;
  int64_t padded = in + padLo + padHi;
  if (padded < span)
    opFail(call, "window of size " + std::to_string(span) + " does not fit an input extent of " + std::to_string(in) +
                     " with padding");
  int64_t num = padded - span;
  return (ceilMode ? (num + stride - 1) / stride : num / stride) + 1;
}

// Where batch, channel, height and width sit in a 4-d data layout (NCHW or
// NHWC, as TVM writes them); results keep their input's layout.
struct DataAxes {
  size_t n, c, h, w;
};
DataAxes dataAxes(const AttrReader& attrs, std::string_view attr) {
  std::string l = attrs.getChoice(attr, {"NCHW", "NHWC"});
  std::string out = attrs.getString("out_layout", "");
  if (!out.empty() && out != l) attrs.fail("out_layout", "= \"" + out + "\" must be the data layout " + l);
  return l == "NCHW" ? DataAxes{0, 1, 2, 3} : DataAxes{0, 3, 1, 2};
}
// Where output channels, input channels and the kernel's height and width sit
// in a conv2d weight: OIHW, or the plain layouts TVM's programs also write (HWIO
// for NHWC, OHWI for NHWC on Arm and in its pattern tests, IHWO, ...).
struct KernelAxes {
  size_t o, i, h, w;
};
KernelAxes kernelAxes(const AttrReader& attrs) {
  std::string l = attrs.getChoice("kernel_layout", {"OIHW", "HWIO", "OHWI", "IHWO", "HWOI", "IOHW"});
  return KernelAxes{l.find('O'), l.find('I'), l.find('H'), l.find('W')};
}

std::vector<TensorDesc> conv2dRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  const TensorDesc& w = call.inputs[1];
  requireDType(call, x, DTypeClass::Numeric, "data");
  // TVM's quantized convolution: integer data and weights of different types
  // (uint8 x int8), accumulated in an integer out_dtype.
  auto out = call.attrs.getDType("out_dtype");
  bool quantized = x.dtype != w.dtype && isInt(x.dtype) && isInt(w.dtype) && out &&
                   (*out == DType::Int32 || *out == DType::Int64);
  if (!quantized) requireSameDType(call, x, w);
  requireRank(call, x, 4, "data");
  requireRank(call, w, 4, "weight");
  DataAxes da = dataAxes(call.attrs, "data_layout");
  KernelAxes ka = kernelAxes(call.attrs);
  Window2d win = windowAttrs(call.attrs);
  auto& strides = win.strides;
  auto& dilation = win.dilation;
  auto& pad = win.pad;
  int64_t groups = call.attrs.getInt("groups", 1);
  if (groups < 1) call.attrs.fail("groups", "must be positive");
  int64_t o = w.shape[ka.o], i = w.shape[ka.i], kh = w.shape[ka.h], kw = w.shape[ka.w];
  if (x.shape[da.c] != kAnyDim && i != kAnyDim && x.shape[da.c] != i * groups)
    opFail(call, "data has " + std::to_string(x.shape[da.c]) + " channels but the weight expects " +
                     std::to_string(i * groups) + " (" + std::to_string(i) + " per group, groups=" +
                     std::to_string(groups) + ")");
  if (o != kAnyDim && o % groups != 0) call.attrs.fail("groups", "must divide the weight's output channels");
  if (call.attrs.has("channels") && o != kAnyDim && call.attrs.getInt("channels", 0) != o)
    call.attrs.fail("channels", "= " + std::to_string(call.attrs.getInt("channels", 0)) +
                                    " does not match the weight's " + std::to_string(o) + " output channels");
  if (auto ks = call.attrs.getIntList("kernel_size")) {
    if (ks->size() != 2 || (kh != kAnyDim && (*ks)[0] != kh) || (kw != kAnyDim && (*ks)[1] != kw))
      call.attrs.fail("kernel_size", "does not match the weight's kernel of " + dimToString(kh) + "x" +
                                         dimToString(kw));
  }
  if (kh == kAnyDim || kw == kAnyDim) opFail(call, "the kernel's spatial size must be static");
  DType dt = call.attrs.getDType("out_dtype").value_or(x.dtype);
  Shape shape(4);
  shape[da.n] = x.shape[da.n];
  shape[da.c] = o;
  shape[da.h] = windowOut(call, x.shape[da.h], pad[0], pad[2], kh, strides[0], dilation[0], false);
  shape[da.w] = windowOut(call, x.shape[da.w], pad[1], pad[3], kw, strides[1], dilation[1], false);
  return {TensorDesc{dt, shape}};
}

std::vector<TensorDesc> pool2dRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireDType(call, x, DTypeClass::Numeric, "data");
  requireRank(call, x, 4, "data");
  DataAxes da = dataAxes(call.attrs, "layout");
  call.attrs.getBool("count_include_pad", false);
  if (!call.attrs.has("pool_size")) call.attrs.fail("pool_size", "is required");
  auto pool = pairAttr(call.attrs, "pool_size", 1);
  Window2d win = windowAttrs(call.attrs);
  auto& strides = win.strides;
  auto& dilation = win.dilation;
  auto& pad = win.pad;
  bool ceilMode = call.attrs.getBool("ceil_mode", false);
  Shape shape = x.shape;
  shape[da.h] = windowOut(call, x.shape[da.h], pad[0], pad[2], pool[0], strides[0], dilation[0], ceilMode);
  shape[da.w] = windowOut(call, x.shape[da.w], pad[1], pad[3], pool[1], strides[1], dilation[1], ceilMode);
  return {TensorDesc{x.dtype, shape}};
}

std::vector<TensorDesc> globalPoolRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireDType(call, x, DTypeClass::Numeric, "data");
  requireRank(call, x, 4, "data");
  DataAxes da = dataAxes(call.attrs, "layout");
  Shape shape = x.shape;
  shape[da.h] = shape[da.w] = 1;
  return {TensorDesc{x.dtype, shape}};
}


// ---- compute rules ----
using loop::BinaryOp;
using loop::ExprId;
using loop::ReduceOp;

// TVM's nn.batch_norm in its inference form: (data, gamma, beta, moving_mean,
// moving_var) to the 3-tuple (normalized data, moving_mean, moving_var).
std::vector<TensorDesc> batchNormRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  requireDType(call, x, DTypeClass::Float, "data");
  int64_t axis = normalizeAxis(call, call.attrs.getInt("axis", 1), x.rank());
  call.attrs.getFloat("epsilon", 1e-5);
  call.attrs.getBool("center", true);
  call.attrs.getBool("scale", true);
  const char* names[] = {"gamma", "beta", "moving_mean", "moving_var"};
  for (int k = 1; k < 5; ++k) {
    const TensorDesc& p = call.inputs[k];
    requireSameDType(call, x, p);
    requireRank(call, p, 1, names[k - 1]);
    if (!dimsCompatible(p.shape[0], x.shape[axis]))
      opFail(call, std::string(names[k - 1]) + " has " + dimToString(p.shape[0]) + " elements but axis " +
                       std::to_string(axis) + " of the data has " + dimToString(x.shape[axis]));
  }
  return {x, call.inputs[3], call.inputs[4]};
}

size_t axisOf(const ComputeCall& c, int64_t dflt) {
  int64_t a = c.attrs.getInt("axis", dflt);
  return static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(c.inputs[0].rank()) : a);
}

int32_t biasAddCompute(const ComputeCall& c) {
  size_t a = axisOf(c, 1);
  std::vector<ExprId> bi{c.index[a]};
  return c.b.binary(BinaryOp::Add, c.load(0, c.index), c.load(1, bi));
}

// The operand along `axis` at position var `v`, the rest of the index fixed.
ExprId alongAxis(const ComputeCall& c, size_t axis, int32_t v) {
  std::vector<ExprId> idx(c.index.begin(), c.index.end());
  idx[axis] = c.b.var(v);
  return c.load(0, idx);
}

ExprId reduceAlong(const ComputeCall& c, size_t axis, ReduceOp op, const std::function<ExprId(ExprId)>& body) {
  int32_t v = c.b.newVar();
  return c.b.reduce(op, {v}, {c.inputDim(0, axis)}, body(alongAxis(c, axis, v)));
}

template <bool Log>
int32_t softmaxCompute(const ComputeCall& c) {
  size_t a = axisOf(c, -1);
  ExprId m = reduceAlong(c, a, ReduceOp::Max, [](ExprId x) { return x; });
  ExprId s = reduceAlong(c, a, ReduceOp::Sum, [&](ExprId x) {
    return c.b.unary(loop::UnaryOp::Exp, c.b.binary(BinaryOp::Sub, x, m));
  });
  ExprId shifted = c.b.binary(BinaryOp::Sub, c.load(0, c.index), m);
  if (Log) return c.b.binary(BinaryOp::Sub, shifted, c.b.unary(loop::UnaryOp::Log, s));
  // One division per row (loop-invariant, hoisted), a multiplication per element.
  ExprId inv = c.b.binary(BinaryOp::Div, c.b.floatConst(1.0, c.b.typeOf(s)), s);
  return c.b.binary(BinaryOp::Mul, c.b.unary(loop::UnaryOp::Exp, shifted), inv);
}

int32_t layerNormCompute(const ComputeCall& c) {
  size_t a = axisOf(c, -1);
  DType t = c.b.typeOf(c.load(0, c.index));
  ExprId n = c.b.cast(t, c.inputDim(0, a));
  ExprId mean = c.b.binary(BinaryOp::Div, reduceAlong(c, a, ReduceOp::Sum, [](ExprId x) { return x; }), n);
  ExprId var = c.b.binary(BinaryOp::Div, reduceAlong(c, a, ReduceOp::Sum, [&](ExprId x) {
                            ExprId d = c.b.binary(BinaryOp::Sub, x, mean);
                            return c.b.binary(BinaryOp::Mul, d, d);
                          }), n);
  ExprId eps = c.b.floatConst(c.attrs.getFloat("epsilon", 1e-5), t);
  ExprId y = c.b.binary(BinaryOp::Mul, c.b.binary(BinaryOp::Sub, c.load(0, c.index), mean),
                        c.b.unary(loop::UnaryOp::Rsqrt, c.b.binary(BinaryOp::Add, var, eps)));
  std::vector<ExprId> pi{c.index[a]};
  if (c.attrs.getBool("scale", true)) y = c.b.binary(BinaryOp::Mul, y, c.load(1, pi));
  if (c.attrs.getBool("center", true)) y = c.b.binary(BinaryOp::Add, y, c.load(2, pi));
  return y;
}

int32_t batchNormCompute(const ComputeCall& c) {
  // Fields 1 and 2 pass the moving statistics through, as TVM's inference form does.
  if (c.field > 0) return c.load(static_cast<size_t>(2 + c.field), c.index);
  size_t a = axisOf(c, 1);
  std::vector<ExprId> pi{c.index[a]};
  DType t = c.b.typeOf(c.load(0, c.index));
  ExprId eps = c.b.floatConst(c.attrs.getFloat("epsilon", 1e-5), t);
  ExprId y = c.b.binary(BinaryOp::Mul, c.b.binary(BinaryOp::Sub, c.load(0, c.index), c.load(3, pi)),
                        c.b.unary(loop::UnaryOp::Rsqrt, c.b.binary(BinaryOp::Add, c.load(4, pi), eps)));
  if (c.attrs.getBool("scale", true)) y = c.b.binary(BinaryOp::Mul, y, c.load(1, pi));
  if (c.attrs.getBool("center", true)) y = c.b.binary(BinaryOp::Add, y, c.load(2, pi));
  return y;
}

// conv2d and pooling: windows over (H, W); padded positions read nothing.
// Input position along spatial axis `s` (0: H, 1: W) for output position `o` and window offset `k`.
ExprId windowPos(const ComputeCall& c, const Window2d& w, int s, ExprId o, ExprId k) {
  ExprId base = c.b.mul(o, c.b.intConst(w.strides[static_cast<size_t>(s)]));
  ExprId off = c.b.mul(k, c.b.intConst(w.dilation[static_cast<size_t>(s)]));
  return c.b.binary(BinaryOp::Sub, c.b.add(base, off), c.b.intConst(w.pad[static_cast<size_t>(s)]));
}

ExprId inside(const ComputeCall& c, ExprId pos, ExprId extent) {
  return c.b.binary(BinaryOp::And, c.b.binary(BinaryOp::Ge, pos, c.b.intConst(0)), c.b.binary(BinaryOp::Lt, pos, extent));
}

int32_t conv2dCompute(const ComputeCall& c) {
  Window2d w = windowAttrs(c.attrs);
  int64_t groups = c.attrs.getInt("groups", 1);
  DType t = c.output.dtype == DType::Float16 ? DType::Float32 : c.output.dtype;
  DataAxes da = dataAxes(c.attrs, "data_layout");
  KernelAxes ka = kernelAxes(c.attrs);
  int32_t ci = c.b.newVar(), kh = c.b.newVar(), kw = c.b.newVar();
  ExprId cinPerGroup = c.inputDim(1, ka.i);
  // Output channel o belongs to group o / (O / groups).
  ExprId outPerGroup = c.b.binary(BinaryOp::Div, c.inputDim(1, ka.o), c.b.intConst(groups));
  ExprId group = c.b.binary(BinaryOp::Div, c.index[da.c], outPerGroup);
  ExprId ih = windowPos(c, w, 0, c.index[da.h], c.b.var(kh));
  ExprId iw = windowPos(c, w, 1, c.index[da.w], c.b.var(kw));
  ExprId ok = c.b.binary(BinaryOp::And, inside(c, ih, c.inputDim(0, da.h)), inside(c, iw, c.inputDim(0, da.w)));
  std::vector<ExprId> xi(4), wi(4);
  xi[da.n] = c.index[da.n];
  xi[da.c] = c.b.add(c.b.mul(group, cinPerGroup), c.b.var(ci));
  xi[da.h] = ih;
  xi[da.w] = iw;
  wi[ka.o] = c.index[da.c];
  wi[ka.i] = c.b.var(ci);
  wi[ka.h] = c.b.var(kh);
  wi[ka.w] = c.b.var(kw);
  ExprId x = c.load(0, guardIndex(c, ok, xi));
  ExprId wt = c.load(1, wi);
  ExprId prod = c.b.binary(BinaryOp::Mul, c.b.cast(t, x), c.b.cast(t, wt));
  ExprId body = c.b.select(ok, prod, c.b.constant(0, t));
  return c.b.reduce(loop::ReduceOp::Sum, {ci, kh, kw}, {cinPerGroup, c.inputDim(1, ka.h), c.inputDim(1, ka.w)}, body);
}

template <bool Max>
int32_t pool2dCompute(const ComputeCall& c) {
  Window2d w = windowAttrs(c.attrs);
  auto pool = pairAttr(c.attrs, "pool_size", 1);
  DataAxes da = dataAxes(c.attrs, "layout");
  int32_t ph = c.b.newVar(), pw = c.b.newVar();
  ExprId ih = windowPos(c, w, 0, c.index[da.h], c.b.var(ph));
  ExprId iw = windowPos(c, w, 1, c.index[da.w], c.b.var(pw));
  ExprId ok = c.b.binary(BinaryOp::And, inside(c, ih, c.inputDim(0, da.h)), inside(c, iw, c.inputDim(0, da.w)));
  std::vector<ExprId> xi(c.index.begin(), c.index.end());
  xi[da.h] = ih;
  xi[da.w] = iw;
  ExprId x = c.load(0, guardIndex(c, ok, xi));
  DType t = c.b.typeOf(x);
  std::vector<int32_t> vars{ph, pw};
  std::vector<ExprId> extents{c.b.intConst(pool[0]), c.b.intConst(pool[1])};
  if (Max) {
    ExprId lowest = isFloat(t) ? c.b.floatConst(-INFINITY, t) : c.b.constant(isInt(t) && !isUnsignedInt(t) ? -1e18 : 0, t);
    if (t == DType::Int8) lowest = c.b.intConst(-128, t);
    if (t == DType::Int16) lowest = c.b.intConst(-32768, t);
    if (t == DType::Int32) lowest = c.b.intConst(INT32_MIN, t);
    if (t == DType::Int64) lowest = c.b.intConst(INT64_MIN, t);
    return c.b.reduce(loop::ReduceOp::Max, vars, extents, c.b.select(ok, x, lowest));
  }
  DType acc = isFloat(t) ? t : DType::Int64;
  ExprId sum = c.b.reduce(loop::ReduceOp::Sum, vars, extents, c.b.select(ok, c.b.cast(acc, x), c.b.constant(0, acc)));
  ExprId count;
  if (c.attrs.getBool("count_include_pad", false)) {
    count = c.b.intConst(pool[0] * pool[1]);
  } else {
    // The number of valid (unpadded) positions: a sum of ok ? 1 : 0 over the same window.
    int32_t qh = c.b.newVar(), qw = c.b.newVar();
    ExprId jh = windowPos(c, w, 0, c.index[da.h], c.b.var(qh));
    ExprId jw = windowPos(c, w, 1, c.index[da.w], c.b.var(qw));
    ExprId valid = c.b.binary(BinaryOp::And, inside(c, jh, c.inputDim(0, da.h)), inside(c, jw, c.inputDim(0, da.w)));
    count = c.b.reduce(loop::ReduceOp::Sum, {qh, qw}, extents, c.b.select(valid, c.b.intConst(1), c.b.intConst(0)));
    count = c.b.binary(BinaryOp::Max, count, c.b.intConst(1));
  }
  return c.b.cast(t, c.b.binary(BinaryOp::Div, sum, c.b.cast(acc, count)));
}

int32_t globalAvgPoolCompute(const ComputeCall& c) {
  DataAxes da = dataAxes(c.attrs, "layout");
  int32_t h = c.b.newVar(), w = c.b.newVar();
  std::vector<ExprId> xi(c.index.begin(), c.index.end());
  xi[da.h] = c.b.var(h);
  xi[da.w] = c.b.var(w);
  ExprId x = c.load(0, xi);
  DType t = c.b.typeOf(x);
  DType acc = isFloat(t) ? t : DType::Int64;
  ExprId sum = c.b.reduce(loop::ReduceOp::Sum, {h, w}, {c.inputDim(0, da.h), c.inputDim(0, da.w)}, c.b.cast(acc, x));
  ExprId n = c.b.binary(BinaryOp::Max, c.b.mul(c.inputDim(0, da.h), c.inputDim(0, da.w)), c.b.intConst(1));
  return c.b.cast(t, c.b.binary(BinaryOp::Div, sum, c.b.cast(acc, n)));
}

}  // namespace

void registerNNOps(OpTable& t) {
  t.add("nn.bias_add", 2, OpPattern::Broadcast, biasAddRule, {"axis"}).compute = biasAddCompute;
  t.add("nn.softmax", 1, OpPattern::Opaque, softmaxRule, {"axis"}).compute = softmaxCompute<false>;
  t.add("nn.log_softmax", 1, OpPattern::Opaque, softmaxRule, {"axis"}).compute = softmaxCompute<true>;
  t.add("nn.layer_norm", 3, OpPattern::Opaque, layerNormRule, {"axis", "epsilon", "center", "scale"}).compute =
      layerNormCompute;
  OpDef& batchNorm = t.add("nn.batch_norm", 5, OpPattern::Injective, batchNormRule, {"axis", "epsilon", "center", "scale"});
  batchNorm.tupleOutput = true;
  batchNorm.compute = batchNormCompute;
  t.add("nn.conv2d", 2, OpPattern::OutEWiseFusable, conv2dRule,
        {"strides", "padding", "dilation", "groups", "channels", "kernel_size", "data_layout", "kernel_layout",
         "out_layout", "out_dtype"})
      .compute = conv2dCompute;
  const std::initializer_list<const char*> poolAttrs = {"pool_size", "strides",   "padding",   "dilation",
                                                        "layout",    "out_layout", "ceil_mode", "count_include_pad"};
  t.add("nn.max_pool2d", 1, OpPattern::OutEWiseFusable, pool2dRule, poolAttrs).compute = pool2dCompute<true>;
  t.add("nn.avg_pool2d", 1, OpPattern::OutEWiseFusable, pool2dRule, poolAttrs).compute = pool2dCompute<false>;
  t.add("nn.global_avg_pool2d", 1, OpPattern::OutEWiseFusable, globalPoolRule, {"layout", "out_layout"}).compute =
      globalAvgPoolCompute;
}

}  // namespace kiln::ops
