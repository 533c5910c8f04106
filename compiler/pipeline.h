// The compiler pipeline as stages, for kilnc's --emit and for compile().
#pragma once

#include <memory>
#include <string>

#include "compiler/ir/module.h"
#include "compiler/partition/regions.h"
#include "compiler/passes/device_placement.h"
#include "kiln/compile.h"

namespace kiln::compiler {

struct Stages {
  std::unique_ptr<ir::Module> typed, fused, anf, lifted;
  // With CompileOptions::partition: the partitioning stages (partition/partition.h).
  std::unique_ptr<ir::Module> composite, partitioned;
  partition::RegionPlan regions;  // over `composite`
  std::vector<std::string> partitionNotes;
  Placement placed;  // the lifted module with devices, copies and specializations
};

// Runs the front end and the IR passes up to device placement (on the compiler stack).
Stages runPasses(std::string_view source, const std::string& file, const CompileOptions& options);

// Runs the memory pass (passes/manifest_memory.h) over the placed module and
// emits bytecode with its plan.
std::shared_ptr<const Executable> emit(const Stages& s, const CompileOptions& options);

// The memory pass's plan for the placed module, as kilnc --emit memory prints it.
std::string printMemoryPlan(const Stages& s, const CompileOptions& options);

}  // namespace kiln::compiler
