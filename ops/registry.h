// The operator table's contents: lookup by name, and the per-group registration
// functions that fill it (elementwise.cc, reduce.cc, ...). The vocabulary they
// use (OpDef, shape and compute rules) is the kernel format's: kernel_ir/op.h.
#pragma once

#include <string_view>
#include <vector>

#include "kernel_ir/op.h"
#include "kiln/tensor.h"

namespace kiln::ops {

const OpDef* findOp(std::string_view name);
// Every operator, in registration order (for tests and documentation).
std::vector<const OpDef*> allOps();

// The device an annotation (on_device, device_copy) names through `attr`
// ("device", "src_device", "dst_device"): a string ("cpu", "cuda:1"), or TVM
// 0.8's integer form (device_type / src_dev_type / dst_dev_type, 1 cpu, 2 cuda,
// with device_id). The host when neither is given.
Device annotatedDevice(const AttrReader& attrs, std::string_view attr);

void registerElementwiseOps(OpTable& table);
void registerReduceOps(OpTable& table);
void registerLinalgOps(OpTable& table);
void registerNNOps(OpTable& table);
void registerTransformOps(OpTable& table);
void registerCreateOps(OpTable& table);

}  // namespace kiln::ops
