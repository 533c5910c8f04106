// Tuning tasks: which of an executable's kernels are worth tuning, at which
// shapes, and how much each matters.
//
// A task is one kernel (by task key: its content, so the same kernel in two
// programs is one task) at one set of concrete input shapes. Static kernels
// have their own shapes. A kernel with `?` dimensions gets the shapes it was
// called with in a recorded run (`vmrun --record-shapes FILE`, which logs them
// inside loops and recursion alike, with calls and time), or, when there is no
// record, power-of-two sizes in a range the user gives for every `?`.
//
// Left out, and counted by reason: kernels a library runs, data-dependent
// kernels (they run natively on the host), host scalar kernels, copies and
// layout changes (nothing computed), and element-wise kernels too small to gain
// (fewer than kTinyElements outputs). Every reduction is a task, products and
// arg-reductions included; so are GEMMs and convolutions.
//
// Weight: recorded calls x recorded mean time (what tuning it can save); with
// no record, the kernel's estimated work, so the order still puts big kernels first.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/executable.h"
#include "kiln/tensor.h"

namespace kiln::tune {

// One line per kernel and shape of a recorded run:
//   kernel=fused_dense_0 task=3f0c9a1e55d2b7c4 shapes=1x128;1024x128 calls=32 us=412.500
// (`us`: total time of those calls). `#` lines are comments.
struct ShapeRecord {
  std::string kernel;  // its name in the recorded executable (for people)
  std::string task;
  std::vector<Shape> shapes;
  uint64_t calls = 0;
  double totalMicros = 0;
};
std::string formatShapeRecord(const ShapeRecord& r);
// Throws kiln::Error "path:line: why" on a malformed line.
std::vector<ShapeRecord> readShapeRecords(const std::string& path);

struct Task {
  uint32_t kernel = 0;  // index into the executable's kernels
  std::string name;     // the kernel's name
  std::string task;     // task key (jit::taskKey)
  std::string ops;      // its operators, "nn.dense, add, tanh"
  std::vector<Shape> shapes;
  bool dynamic = false;  // the kernel has `?` dimensions (shapes from a record or range)
  uint64_t calls = 0;    // recorded calls (0: not recorded)
  double micros = 0;     // recorded mean time per call (0: not recorded)
  double weight = 0;     // calls x time in us, or estimated work when not recorded
};

struct TaskList {
  std::vector<Task> tasks;  // heaviest first
  // Kernels left out, by reason ("copy or layout change": 3).
  std::map<std::string, int> skipped;
  // `?` kernels with neither a record nor a range: listed with their types only.
  std::vector<std::string> unresolved;
  std::string toString() const;
};

// Outputs below this many elements make an element-wise kernel too small to tune.
constexpr int64_t kTinyElements = 4096;

struct ExtractOptions {
  std::vector<ShapeRecord> records;  // from a recorded run
  // Sizes for every `?` dimension when a kernel has no record: powers of two in
  // [minDim, maxDim] (0: no range).
  int64_t minDim = 0, maxDim = 0;
};

TaskList extractTasks(const Executable& exe, const ExtractOptions& options);

// `--dims LO:HI` into options.minDim and maxDim; throws kiln::Error unless 1 <= LO <= HI <= 2^30.
void parseDimRange(const std::string& text, ExtractOptions& options);

}  // namespace kiln::tune
