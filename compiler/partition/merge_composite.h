// mergeComposite: each group of calls that a composite pattern matches becomes a
// call of a function literal marked `Composite="library.name"` (TVM's MergeComposite).
//
//   %1 = nn.relu(nn.conv2d(%x, %w))
// becomes
//   %1 = (fn (%FunctionVar_0_0: T, %FunctionVar_0_1: U, Composite="dnnl.conv2d_relu",
//             PartitionedFromPattern="nn.conv2d_nn.relu_") { nn.relu(nn.conv2d(%FunctionVar_0_0, %FunctionVar_0_1)) })(%x, %w)
//
// Patterns are tried in the table's order (the first has priority), each from the
// end of a function towards its start, so a larger group at the outside wins over
// a smaller one inside it. The group's inputs (what wildcards matched) become the
// function's parameters, in evaluation order; the calls inside it must be used by
// the group alone and lie in the caller's scope (dataflow.h): a call whose value
// is also used elsewhere is never swallowed, so nothing is computed twice. Lets
// taken over are dropped. Prelude functions, primitive functions and functions
// already made for a library (`Compiler=`) are left alone.
#pragma once

#include <memory>

#include "compiler/ir/module.h"
#include "compiler/partition/pattern.h"

namespace kiln::partition {

std::unique_ptr<ir::Module> mergeComposite(const ir::Module& m, const std::vector<CompositePattern>& patterns);

// The composite name of a call's callee (`Composite=` of a function literal), or "".
std::string compositeName(const ir::Call* c);

// Whether partitioning works on this global function at all.
bool partitionable(const ir::GlobalFunction& g);

}  // namespace kiln::partition
