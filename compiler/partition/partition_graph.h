// partitionGraph: each region becomes a global function for its library, called
// where the region's root was (TVM's PartitionGraph).
//
//   def @dnnl_main_0(%x: T, %w: U, Primitive=1, Compiler="dnnl", global_symbol="dnnl_main_0") -> V {
//     <the region's calls over its parameters>
//   }
//   ... @dnnl_main_0(%x, %w) ...
//
// The parameters are the region's inputs (every value it uses from outside:
// arguments of its calls that are not members, callees computed by the program),
// each once, in the order the program evaluated them; the call site passes
// exactly those, so the new function has no free variables (checked: a
// violation is an internal error, not a wrong program). A member feeding several
// others is computed once, bound by a graph binding in the body. Lets the region took
// over are dropped; every other binding stays where it was, and a region's
// result bound by a let keeps its variable. The function is not a Kiln kernel
// (`primitive` is false): a library runs it, or Kiln runs it as an ordinary
// function (partition.h). Names are `<library>_<function>_<n>`, unique in the
// module.
#pragma once

#include <memory>

#include "compiler/ir/module.h"
#include "compiler/partition/regions.h"

namespace kiln::partition {

std::unique_ptr<ir::Module> partitionGraph(const ir::Module& m, const RegionPlan& plan);

}  // namespace kiln::partition
