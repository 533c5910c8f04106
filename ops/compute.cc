// Shared pieces of compute rules.
#include "ops/compute.h"

namespace kiln::ops {

std::vector<loop::ExprId> broadcastIndex(const ComputeCall& c, size_t k) {
  const TensorDesc& in = c.inputs[k];
  size_t outRank = c.output.rank(), inRank = in.rank();
  std::vector<loop::ExprId> idx(inRank);
  for (size_t d = 0; d < inRank; ++d) {
    size_t od = d + (outRank - inRank);
    int64_t id = in.shape[d], odim = c.output.shape[od];
    if (id == 1 && odim != 1) {
      idx[d] = c.b.intConst(0);
    } else if (id == kAnyDim && odim != 1) {
      // Unknown until run time whether this operand broadcasts along d (a
      // loop-invariant test that the optimizer hoists).
      loop::ExprId isOne = c.b.binary(loop::BinaryOp::Eq, c.inputDim(k, d), c.b.intConst(1));
      idx[d] = c.b.select(isOne, c.b.intConst(0), c.index[od]);
    } else {
      idx[d] = c.index[od];
    }
  }
  return idx;
}

}  // namespace kiln::ops
