// The pipeline: front end, partitioning, fusion, ANF, lambda lifting, device placement, bytecode.
#include "compiler/pipeline.h"

#include <algorithm>

#include "compiler/codegen/bytecode_emitter.h"
#include "compiler/frontend.h"
#include "compiler/partition/partition.h"
#include "kernel_ir/library_support.h"
#include "compiler/passes/fold_static_shapes.h"
#include "compiler/passes/fuse_ops.h"
#include "compiler/passes/hoist_projections.h"
#include "compiler/passes/lambda_lift.h"
#include "compiler/passes/to_anf.h"

namespace kiln::compiler {

Stages runPasses(std::string_view source, const std::string& file, const CompileOptions& options) {
  return onCompilerStack([&] {
    Stages s;
    FrontendOptions fo;
    fo.prelude = options.prelude;
    s.typed = loadProgram(source, file, fo);
    std::unique_ptr<ir::Module> folded = foldStaticShapes(*s.typed);
    if (options.hoistLoopProjections) folded = hoistLoopProjections(*folded);
    if (!options.partition.empty()) {
      partition::PartitionOptions po;
      po.libraries = options.partition;
      // A library runs on the host CPU: its regions go to it when the program computes there.
      Device compute = options.devices.empty() ? Device{} : options.devices.front();
      po.offloadable = [compute](const std::string& lib) {
        const kernel_ir::LibrarySupport* l = kernel_ir::findLibrary(lib);
        return l && l->available && compute.kind == Device::Kind::CPU;
      };
      for (const auto& [name, text] : options.partitionPatterns)
        po.patterns.append(partition::parsePatternTable(text, name));
      partition::PartitionStages ps = partition::partitionModule(*folded, po);
      s.composite = std::move(ps.composite);
      s.partitioned = std::move(ps.partitioned);
      s.regions = std::move(ps.plan);
      s.partitionNotes = std::move(ps.notes);
      folded = std::move(ps.lowered);
    }
    bool cpuOnly = std::none_of(options.devices.begin(), options.devices.end(), [](const Device& d) { return d.isGpu(); });
    s.fused = fuseOps(*folded, FuseOptions{options.fuse, cpuOnly, options.mergeKernels});
    s.anf = toANF(*s.fused);
    s.lifted = lambdaLift(*s.anf);
    s.placed = placeDevices(*s.lifted, options.devices);
    return s;
  });
}

std::shared_ptr<const Executable> emit(const Stages& s, const CompileOptions& options) {
  return onCompilerStack([&] {
    EmitOptions eo;
    eo.params = options.params;
    eo.planMemory = options.planMemory;
    eo.devices = &s.placed.plan;
    KernelTableBuilder kernels(*s.placed.module);
    MemoryPlan memory = manifestMemory(*s.placed.module, kernels, ManifestOptions{eo.planMemory, eo.devices});
    return emitBytecode(*s.placed.module, eo, kernels, memory);
  });
}

std::string printMemoryPlan(const Stages& s, const CompileOptions& options) {
  return onCompilerStack([&] {
    KernelTableBuilder kernels(*s.placed.module);
    return manifestMemory(*s.placed.module, kernels, ManifestOptions{options.planMemory, &s.placed.plan}).toString();
  });
}

}  // namespace kiln::compiler

namespace kiln {

std::shared_ptr<const Executable> compile(std::string_view source, const std::string& file, const CompileOptions& options) {
  compiler::Stages s = compiler::runPasses(source, file, options);
  return compiler::emit(s, options);
}

std::shared_ptr<const Executable> compileFile(const std::string& path, const CompileOptions& options) {
  return compile(compiler::readSourceFile(path), path, options);
}

}  // namespace kiln
