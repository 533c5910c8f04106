// Linear algebra: nn.dense, nn.matmul, nn.batch_matmul.
#include "kernel_ir/compute.h"
#include "ops/registry.h"
#include "kernel_ir/shape_util.h"

namespace kiln::ops {
namespace {

DType outDType(const OpCall& call, DType in) { return call.attrs.getDType("out_dtype").value_or(in); }

void requireContraction(const OpCall& call, int64_t ka, int64_t kb) {
  if (!dimsCompatible(ka, kb))
    opFail(call, "reduction dimensions differ: " + dimToString(ka) + " and " + dimToString(kb) + " (operands " +
                     descToString(call.inputs[0]) + " and " + descToString(call.inputs[1]) + ")");
}

void checkUnits(const OpCall& call, int64_t n) {
  if (call.attrs.has("units")) {
    int64_t units = call.attrs.getInt("units", 0);
    if (n != kAnyDim && units != n)
      call.attrs.fail("units", "= " + std::to_string(units) + " does not match the weight's " + std::to_string(n) +
                                   " output units");
  }
}

std::vector<TensorDesc> denseRule(const OpCall& call) {
  const TensorDesc& x = call.inputs[0];
  const TensorDesc& w = call.inputs[1];
  requireDType(call, x, DTypeClass::Numeric, "data");
  requireSameDType(call, x, w);
  if (x.rank() < 1) opFail(call, "data must have rank at least 1, but has type " + descToString(x));
  requireRank(call, w, 2, "weight");
  requireContraction(call, x.shape.back(), w.shape[1]);
  checkUnits(call, w.shape[0]);
  TensorDesc out{outDType(call, x.dtype), x.shape};
  out.shape.back() = w.shape[0];
  return {out};
}

std::vector<TensorDesc> matmulRule(const OpCall& call) {
  const TensorDesc& a = call.inputs[0];
  const TensorDesc& b = call.inputs[1];
  requireDType(call, a, DTypeClass::Numeric, "tensor_a");
  requireSameDType(call, a, b);
  bool ta = call.attrs.getBool("transpose_a", false), tb = call.attrs.getBool("transpose_b", false);
  if (a.rank() < 2) opFail(call, "tensor_a must have rank at least 2, but has type " + descToString(a));
  requireRank(call, b, 2, "tensor_b");
  size_t r = a.rank();
  int64_t m = ta ? a.shape[r - 1] : a.shape[r - 2];
  int64_t ka = ta ? a.shape[r - 2] : a.shape[r - 1];
  int64_t kb = tb ? b.shape[1] : b.shape[0];
  int64_t n = tb ? b.shape[0] : b.shape[1];
  requireContraction(call, ka, kb);
  checkUnits(call, n);
  TensorDesc out{outDType(call, a.dtype), a.shape};
  out.shape[r - 2] = m;
  out.shape[r - 1] = n;
  return {out};
}

std::vector<TensorDesc> batchMatmulRule(const OpCall& call) {
  const TensorDesc& a = call.inputs[0];
  const TensorDesc& b = call.inputs[1];
  requireDType(call, a, DTypeClass::Numeric, "tensor_a");
  requireSameDType(call, a, b);
  requireRank(call, a, 3, "tensor_a");
  requireRank(call, b, 3, "tensor_b");
  bool ta = call.attrs.getBool("transpose_a", false), tb = call.attrs.getBool("transpose_b", true);
  int64_t m = ta ? a.shape[2] : a.shape[1];
  int64_t ka = ta ? a.shape[1] : a.shape[2];
  int64_t kb = tb ? b.shape[2] : b.shape[1];
  int64_t n = tb ? b.shape[1] : b.shape[2];
  requireContraction(call, ka, kb);
  int64_t ba = a.shape[0], bb = b.shape[0], batch;
  if (ba == bb) batch = ba;
  else if (ba == 1) batch = bb;
  else if (bb == 1) batch = ba;
  else if (ba == kAnyDim || bb == kAnyDim) batch = mergeDims(ba, bb);
  else opFail(call, "batch dimensions " + dimToString(ba) + " and " + dimToString(bb) + " do not broadcast");
  return {TensorDesc{outDType(call, a.dtype), {batch, m, n}}};
}


// ---- compute rules (generic: a sum over the contraction) ----
using loop::BinaryOp;
using loop::ExprId;

ExprId contract(const ComputeCall& c, int32_t k, ExprId extent, ExprId a, ExprId b) {
  DType t = c.output.dtype == DType::Float16 ? DType::Float32 : c.output.dtype;
  return c.b.reduce(loop::ReduceOp::Sum, {k}, {extent}, c.b.binary(BinaryOp::Mul, c.b.cast(t, a), c.b.cast(t, b)));
}

int32_t denseCompute(const ComputeCall& c) {
  size_t r = c.output.rank();
  int32_t k = c.b.newVar();
  std::vector<ExprId> xi(c.index.begin(), c.index.end());
  xi[r - 1] = c.b.var(k);
  std::vector<ExprId> wi{c.index[r - 1], c.b.var(k)};
  return contract(c, k, c.inputDim(1, 1), c.load(0, xi), c.load(1, wi));
}

int32_t matmulCompute(const ComputeCall& c) {
  bool ta = c.attrs.getBool("transpose_a", false), tb = c.attrs.getBool("transpose_b", false);
  size_t r = c.output.rank();
  int32_t k = c.b.newVar();
  ExprId kv = c.b.var(k);
  std::vector<ExprId> ai(c.index.begin(), c.index.end());
  ai[r - 2] = ta ? kv : c.index[r - 2];
  ai[r - 1] = ta ? c.index[r - 2] : kv;
  std::vector<ExprId> bi = tb ? std::vector<ExprId>{c.index[r - 1], kv} : std::vector<ExprId>{kv, c.index[r - 1]};
  return contract(c, k, c.inputDim(0, ta ? r - 2 : r - 1), c.load(0, ai), c.load(1, bi));
}

int32_t batchMatmulCompute(const ComputeCall& c) {
  bool ta = c.attrs.getBool("transpose_a", false), tb = c.attrs.getBool("transpose_b", true);
  int32_t k = c.b.newVar();
  ExprId kv = c.b.var(k);
  auto batch = [&](size_t op) {
    // A batch extent of 1 broadcasts.
    ExprId one = c.b.binary(BinaryOp::Eq, c.inputDim(op, 0), c.b.intConst(1));
    return c.inputs[op].shape[0] == 1 ? c.b.intConst(0) : c.b.select(one, c.b.intConst(0), c.index[0]);
  };
  std::vector<ExprId> ai{batch(0), ta ? kv : c.index[1], ta ? c.index[1] : kv};
  std::vector<ExprId> bi{batch(1), tb ? c.index[2] : kv, tb ? kv : c.index[2]};
  return contract(c, k, c.inputDim(0, ta ? 1 : 2), c.load(0, ai), c.load(1, bi));
}

}  // namespace

void registerLinalgOps(OpTable& t) {
  t.add("nn.dense", 2, OpPattern::OutEWiseFusable, denseRule, {"units", "out_dtype"}).compute = denseCompute;
  t.add("nn.matmul", 2, OpPattern::OutEWiseFusable, matmulRule, {"units", "out_dtype", "transpose_a", "transpose_b"})
      .compute = matmulCompute;
  t.add("nn.batch_matmul", 2, OpPattern::OutEWiseFusable, batchMatmulRule, {"out_dtype", "transpose_a", "transpose_b"})
      .compute = batchMatmulCompute;
}

}  // namespace kiln::ops
