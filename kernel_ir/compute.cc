// Shared pieces of compute rules.
#include "kernel_ir/compute.h"

namespace kiln::ops {

namespace {
// Whether operand k can be broadcast along output dimension `od`: only if some
// other operand may be larger there (it covers that dimension and is not static 1).
bool mayBroadcast(const ComputeCall& c, size_t k, size_t od) {
  size_t outRank = c.output.rank();
  for (size_t j = 0; j < c.inputs.size(); ++j) {
    if (j == k) continue;
    const TensorDesc& other = c.inputs[j];
    if (od < outRank - other.rank()) continue;  // `other` has no such dimension
    if (other.shape[od - (outRank - other.rank())] != 1) return true;
  }
  return false;
}
}  // namespace

std::vector<loop::ExprId> broadcastIndex(const ComputeCall& c, size_t k) {
  const TensorDesc& in = c.inputs[k];
  size_t outRank = c.output.rank(), inRank = in.rank();
  std::vector<loop::ExprId> idx(inRank);
  for (size_t d = 0; d < inRank; ++d) {
    size_t od = d + (outRank - inRank);
    int64_t id = in.shape[d], odim = c.output.shape[od];
    if (id == kAnyDim && !mayBroadcast(c, k, od)) {
      idx[d] = c.index[od];  // the result's extent is this operand's: no broadcast possible
    } else if (id == 1 && odim != 1) {
      idx[d] = c.b.intConst(0);
    } else if (id == kAnyDim && odim != 1 && c.noBroadcastGuards) {
      // Fast version: assume the extents agree, and let the kernel check it.
      c.noBroadcastGuards->push_back(c.b.binary(loop::BinaryOp::Eq, c.inputDim(k, d), c.outputDim(od)));
      idx[d] = c.index[od];
    } else if (id == kAnyDim && odim != 1) {
      // Unknown until run time whether this operand broadcasts along d.
      loop::ExprId isOne = c.b.binary(loop::BinaryOp::Eq, c.inputDim(k, d), c.b.intConst(1));
      idx[d] = c.b.select(isOne, c.b.intConst(0), c.index[od]);
    } else {
      idx[d] = c.index[od];
    }
  }
  return idx;
}

std::vector<loop::ExprId> unflatten(const ComputeCall& c, size_t k, loop::ExprId flat) {
  size_t rank = c.inputs[k].rank();
  std::vector<loop::ExprId> idx(rank);
  for (size_t d = rank; d-- > 0;) {
    loop::ExprId extent = c.inputDim(k, d);
    if (d == 0) {
      idx[d] = flat;
    } else {
      idx[d] = c.b.binary(loop::BinaryOp::Mod, flat, extent);
      flat = c.b.binary(loop::BinaryOp::Div, flat, extent);
    }
  }
  return idx;
}

loop::ExprId flattenOutput(const ComputeCall& c, std::span<const loop::ExprId> index) {
  loop::ExprId flat = c.b.intConst(0);
  for (size_t d = 0; d < index.size(); ++d) flat = c.b.add(c.b.mul(flat, c.outputDim(d)), index[d]);
  return flat;
}

std::vector<loop::ExprId> guardIndex(const ComputeCall& c, loop::ExprId ok, std::vector<loop::ExprId> index) {
  for (loop::ExprId& e : index) e = c.b.select(ok, e, c.b.intConst(0));
  return index;
}

loop::ExprId operandSize(const ComputeCall& c, size_t k) {
  loop::ExprId n = c.b.intConst(1);
  for (size_t d = 0; d < c.inputs[k].rank(); ++d) n = c.b.mul(n, c.inputDim(k, d));
  return n;
}

}  // namespace kiln::ops
