// FuseOps: groups operator calls into primitive functions, one per kernel.
//
// Each operator has a pattern (ops/op.h). Within one region of a function (its
// body, or an if/match branch: control flow bounds a kernel), a producer fuses
// into its consumer when the consumer is its only use and the patterns allow:
// element-wise, broadcast and injective producers fuse into any consumer up to a
// reduction; a reduction or a dense/matmul/conv2d (out-element-wise-fusable)
// takes element-wise consumers as an epilogue; a group has at most one such
// anchor, and the inputs of dense/matmul/conv2d are never inlined (they would be
// recomputed per output element). The exception (FuseOptions::convChains): a
// conv2d with a bias/ReLU epilogue joins the conv2d its output feeds, which
// computes it band by band as it reads it (jit::sconv2dPair). Every group, single operators included,
// becomes a primitive function called where its root was; the VM calls each as a
// kernel. Then consecutive kernels that read each other's results may merge into
// one kernel of several results (FuseOptions::mergeKernels, merge_kernels.h).
// The pass builds a new module that shares the old one's arena.
#pragma once

#include <memory>
#include <vector>

#include "compiler/ir/module.h"

namespace kiln::compiler {

struct FuseOptions {
  bool fuse = true;  // false: every operator is a kernel of its own (for comparisons)
  // Chained convolutions as one kernel: CPU kernels only (the GPU lowering has no
  // such statement), so only where every device is a CPU.
  bool convChains = false;
  // Consecutive kernel bindings, each reading the ones before it, merged into one
  // kernel with several results (merge_kernels.h).
  bool mergeKernels = false;
};

std::unique_ptr<ir::Module> fuseOps(const ir::Module& m, const FuseOptions& opts = {});

// Every primitive function of a fused module, in order of appearance, once each
// (a kernel shared by several call sites appears once).
std::vector<const ir::Function*> primitiveFunctions(const ir::Module& m);

}  // namespace kiln::compiler
