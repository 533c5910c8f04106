// Compiling programs: Relay text to an Executable, in memory.
//
// The pipeline (each stage printable with `kilnc --emit`): parse and type-check,
// fuse operators into kernels, A-normal form, lambda lifting, device placement,
// bytecode emission.
// Errors in the program are kiln::Errors carrying file:line:col. Safe to call from
// many threads at once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/executable.h"
#include "kiln/tensor.h"

namespace kiln {

struct CompileOptions {
  // `main`'s parameters bound as constants (weights), by name without `%`.
  std::map<std::string, Tensor> params;
  bool fuse = true;     // false: one kernel per operator
  bool prelude = true;  // the standard prelude (List, map, foldl, ...)
  bool planMemory = true;  // static temporaries with disjoint lifetimes share storage
  // A counting loop's input projection (dense of a step's slice of a tensor
  // bound outside the loop) computed for every step at once before the loop.
  bool hoistLoopProjections = true;
  // Consecutive kernels, each reading the ones before it (an LSTM cell's gates
  // after its product), merged into one kernel with several results.
  bool mergeKernels = true;
  // Devices, the default (where the program computes) first; the host cpu is
  // always added for control flow, shapes and scalars. {cpu:1, cpu} runs the
  // tensor work on the second CPU device, with copies where values cross.
  std::vector<Device> devices{Device{}};
  // Partitioning to external libraries (README "Partitioning"): the libraries
  // regions go to, in order of preference, and pattern files (name, text) giving
  // their composite patterns and the calls they support. A region of a library
  // Kiln cannot call here runs on Kiln's own kernels. Empty: nothing partitioned.
  std::vector<std::string> partition;
  std::vector<std::pair<std::string, std::string>> partitionPatterns;
};

std::shared_ptr<const Executable> compile(std::string_view source, const std::string& file = "<input>",
                                    const CompileOptions& options = {});
std::shared_ptr<const Executable> compileFile(const std::string& path, const CompileOptions& options = {});

}  // namespace kiln
