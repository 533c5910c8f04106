// Row batching plans: which kernels run stacked rows exactly, and their batched twins.
#include "kernel_ir/row_batching.h"

#include <algorithm>
#include <string_view>

#include "kernel_ir/op.h"

namespace kiln::kernel_ir {

namespace {

bool allStatic(const ops::Shape& s) {
  return std::all_of(s.begin(), s.end(), [](int64_t d) { return d != ops::kAnyDim; });
}

// `axis` of a rank-`rank` operand, negative counting from the end; -1 when out of range.
int64_t axisOf(const FusedNode& n, std::string_view attr, int64_t dflt, size_t rank) {
  int64_t a = ops::AttrReader(n.op->name, n.attrs).getInt(attr, dflt);
  if (a < 0) a += static_cast<int64_t>(rank);
  return a >= 0 && a < static_cast<int64_t>(rank) ? a : -1;
}

// Element-wise and broadcasting operators: each result element reads its operands
// at the same index (a lower-rank operand broadcast over the leading axes). A
// stacked operand must then be of the result's rank (its leading axis is the
// result's) and every other operand of that rank one row tall (broadcast over
// the rows): anything else would give rows different data.
bool broadcastKeepsRows(const FusedFunction& f, const FusedNode& n, const std::vector<bool>& batched) {
  size_t rank = n.type.rank();
  if (rank == 0 || n.type.shape[0] != 1) return false;
  for (int32_t in : n.inputs) {
    const ops::TensorDesc& t = f.typeOf(in);
    if (batched[static_cast<size_t>(in)] ? t.rank() != rank : t.rank() == rank && t.shape[0] != 1) return false;
  }
  return true;
}

// Whether node `n`, with at least one stacked operand, keeps rows apart.
bool keepsRows(const FusedFunction& f, const FusedNode& n, const std::vector<bool>& batched) {
  const std::string& name = n.op->name;
  auto stacked = [&](size_t i) { return i < n.inputs.size() && batched[static_cast<size_t>(n.inputs[i])]; };
  if (n.type.rank() < 1 || n.type.shape[0] != 1) return false;
  // A field of a split across the row (an LSTM cell's gates).
  if (name == "split") return stacked(0) && axisOf(n, "axis", 0, n.type.rank()) > 0;
  if (n.op->tupleOutput) return false;
  if (name == "nn.dense") return n.type.rank() >= 2 && stacked(0) && !stacked(1);
  if (name == "nn.bias_add") return stacked(0) && !stacked(1) && axisOf(n, "axis", 1, n.type.rank()) > 0;
  if (name == "concatenate") {
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!stacked(i)) return false;
    return axisOf(n, "axis", 0, n.type.rank()) > 0;
  }
  if (name == "nn.softmax" || name == "nn.log_softmax") return axisOf(n, "axis", -1, n.type.rank()) > 0;
  bool shaped = std::find(n.op->attrNames.begin(), n.op->attrNames.end(), "shape") != n.op->attrNames.end();
  if (n.op->pattern == ops::OpPattern::ElemWise && n.op->numInputs >= 1 && !shaped)
    return broadcastKeepsRows(f, n, batched);
  if (n.op->pattern == ops::OpPattern::Broadcast && name != "expand_dims" && name != "broadcast_to" && !shaped)
    return broadcastKeepsRows(f, n, batched);
  return false;
}

}  // namespace

std::optional<RowBatchPlan> rowBatchPlan(const FusedFunction& f) {
  if (!f.library.empty() || f.outputs.empty()) return std::nullopt;
  RowBatchPlan plan;
  std::vector<bool> batched(f.numValues(), false);
  bool anyRow = false;
  for (size_t i = 0; i < f.params.size(); ++i) {
    const ops::TensorDesc& p = f.params[i];
    if (!allStatic(p.shape)) return std::nullopt;
    batched[i] = p.rank() >= 2 && p.shape[0] == 1;
    anyRow = anyRow || batched[i];
  }
  if (!anyRow) return std::nullopt;
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    const FusedNode& n = f.nodes[i];
    if (!allStatic(n.type.shape)) return std::nullopt;
    if (n.isConstant() || n.op->annotation || n.op->dataDependent) {
      if (!n.isConstant()) return std::nullopt;
      continue;
    }
    bool any = std::any_of(n.inputs.begin(), n.inputs.end(), [&](int32_t in) { return batched[static_cast<size_t>(in)]; });
    if (!any) continue;  // computed from shared operands alone: the same for every row
    if (!keepsRows(f, n, batched)) return std::nullopt;
    batched[f.params.size() + i] = true;
  }
  for (int32_t o : f.outputs)
    if (!batched[static_cast<size_t>(o)]) return std::nullopt;

  // The twin: row parameters `?` tall, every type again from the shape rules,
  // which must give the original types with the leading `?` where rows are.
  plan.rowParam.assign(batched.begin(), batched.begin() + static_cast<ptrdiff_t>(f.params.size()));
  FusedFunction& t = plan.twin;
  t = f;
  t.name = f.name + "_rows";
  for (size_t i = 0; i < t.params.size(); ++i)
    if (plan.rowParam[i]) t.params[i].shape[0] = ops::kAnyDim;
  std::vector<ops::TensorDesc> operands;
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    FusedNode& n = t.nodes[i];
    if (n.isConstant()) continue;
    operands.clear();
    for (int32_t in : n.inputs) operands.push_back(t.typeOf(in));
    std::vector<ops::TensorDesc> outs;
    try {
      outs = n.op->infer(operands, n.attrs);
    } catch (const ops::OpError&) {
      return std::nullopt;
    }
    if (n.field < 0 || static_cast<size_t>(n.field) >= outs.size()) return std::nullopt;
    ops::TensorDesc expect = f.nodes[i].type;
    if (batched[f.params.size() + i]) expect.shape[0] = ops::kAnyDim;
    if (!(outs[static_cast<size_t>(n.field)] == expect)) return std::nullopt;
    n.type = expect;
  }
  return plan;
}

}  // namespace kiln::kernel_ir
