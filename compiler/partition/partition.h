// Partitioning a program to external libraries, the four passes in order (as
// TVM's BYOC flow): mergeComposite, annotateTargets, mergeCompilerRegions,
// partitionGraph; and what Kiln does with a region no library here can take.
//
// Input: a type-checked module. Output: the stages, each printable with `kilnc
// --emit composite|annotated|regions|partitioned`, and `lowered`, the module the
// rest of the pipeline compiles: regions of libraries Kiln can call become
// kernels for that library; every other region stays a global function that
// Kiln runs with its own kernels (noted in `notes`): see lowerRegions.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/partition/pattern.h"
#include "compiler/partition/regions.h"

namespace kiln::partition {

struct PartitionOptions {
  std::vector<std::string> libraries;  // in order of preference
  // Composites and supports rules (others' libraries ignored); a library they
  // say nothing of gets Kiln's own patterns for it (builtin_patterns.h).
  PatternTable patterns;
  // Whether Kiln can hand a region of this library to the library itself.
  std::function<bool(const std::string&)> offloadable = [](const std::string&) { return false; };
};

struct PartitionStages {
  std::unique_ptr<ir::Module> composite, partitioned, lowered;
  RegionPlan plan;             // over `composite`
  std::vector<std::string> notes;  // what stays on Kiln, and why
};

PartitionStages partitionModule(const ir::Module& typed, const PartitionOptions& options);

// The module the rest of the pipeline compiles: each region of an `offloadable`
// library that the library takes (kernel_ir/library_support.h) becomes a kernel
// for it — a primitive function literal with `Compiler=`, its composites
// flattened — at its one call site, and its global is dropped; every other
// region stays a global function Kiln runs, noted with the reason. Composite
// calls left anywhere are inlined (a binding per parameter, evaluation order kept).
std::unique_ptr<ir::Module> lowerRegions(const ir::Module& m, const std::function<bool(const std::string&)>& offloadable,
                                         std::vector<std::string>& notes);

}  // namespace kiln::partition
