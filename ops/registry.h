// The operator table's contents: lookup by name, and the per-group registration
// functions that fill it (elementwise.cc, reduce.cc, ...). The vocabulary they
// use (OpDef, shape and compute rules) is the kernel format's: kernel_ir/op.h.
#pragma once

#include <string_view>
#include <vector>

#include "kernel_ir/op.h"

namespace kiln::ops {

const OpDef* findOp(std::string_view name);
// Every operator, in registration order (for tests and documentation).
std::vector<const OpDef*> allOps();

void registerElementwiseOps(OpTable& table);
void registerReduceOps(OpTable& table);
void registerLinalgOps(OpTable& table);
void registerNNOps(OpTable& table);
void registerTransformOps(OpTable& table);
void registerCreateOps(OpTable& table);

}  // namespace kiln::ops
