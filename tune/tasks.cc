// Tuning tasks: shape records, and extracting the kernels worth tuning.
#include "tune/tasks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "base/read_file.h"
#include "jit/tuning_log.h"
#include "kernel_ir/kernel_kind.h"
#include "kernel_ir/lower.h"
#include "kernel_ir/schedule.h"
#include "kernel_ir/shape_util.h"
#include "kiln/error.h"

namespace kiln::tune {

std::string formatShapeRecord(const ShapeRecord& r) {
  char tail[64];
  std::snprintf(tail, sizeof tail, " calls=%llu us=%.3f", static_cast<unsigned long long>(r.calls), r.totalMicros);
  return "kernel=" + r.kernel + " task=" + r.task + " shapes=" + jit::formatShapes(r.shapes) + tail;
}

std::vector<ShapeRecord> readShapeRecords(const std::string& path) {
  std::string text = readFileText(path);
  std::vector<ShapeRecord> out;
  size_t lineNo = 0, pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line(text.data() + pos, (nl == std::string::npos ? text.size() : nl) - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++lineNo;
    auto fail = [&](const std::string& why) { throw Error("shape record " + path + ":" + std::to_string(lineNo) + ": " + why); };
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') continue;
    ShapeRecord r;
    int seen = 0;
    std::string_view rest = line.substr(first);
    while (!rest.empty()) {
      size_t sp = rest.find(' ');
      std::string_view field = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
      if (!field.empty() && field.back() == '\r') field.remove_suffix(1);
      if (field.empty()) continue;
      size_t eq = field.find('=');
      if (eq == std::string_view::npos) fail("'" + std::string(field) + "' is not key=value");
      std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "kernel") {
        r.kernel = value, seen |= 1;
      } else if (key == "task") {
        if (value.size() != 16 || value.find_first_not_of("0123456789abcdef") != std::string_view::npos)
          fail("task '" + std::string(value) + "' is not 16 hex digits");
        r.task = value, seen |= 2;
      } else if (key == "shapes") {
        auto s = jit::parseShapes(value);
        if (!s) fail("bad shapes '" + std::string(value) + "'");
        r.shapes = std::move(*s), seen |= 4;
      } else if (key == "calls") {
        auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), r.calls);
        if (ec != std::errc() || p != value.data() + value.size()) fail("bad calls '" + std::string(value) + "'");
        seen |= 8;
      } else if (key == "us") {
        auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), r.totalMicros);
        if (ec != std::errc() || p != value.data() + value.size() || !(r.totalMicros >= 0) || !std::isfinite(r.totalMicros))
          fail("bad time '" + std::string(value) + "'");
        seen |= 16;
      } else {
        fail("unknown field '" + std::string(key) + "'");
      }
    }
    if (seen != 31) fail("a record needs kernel=, task=, shapes=, calls= and us=");
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

using kernel_ir::FusedFunction;

int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n = d > 0 && n > (int64_t(1) << 50) / d ? (int64_t(1) << 50) : n * d;
  return n;
}

// Why `f` is not worth tuning, or "" when it is.
std::string skipReason(const FusedFunction& f, KernelKind kind) {
  if (!f.library.empty()) return "run by a library (" + f.library + ")";
  if (kind == KernelKind::Dynamic) return "data-dependent (runs natively on the host)";
  if (kind == KernelKind::Scalar) return "host scalar";
  static const std::set<std::string> moves = {"reshape", "squeeze", "expand_dims", "copy", "device_copy",
                                              "reshape_like", "nn.batch_flatten", "layout_transform"};
  static const std::set<std::string> shapeOnly = {"shape_of", "ndarray_size"};
  bool onlyShapes = true;
  for (const auto& n : f.nodes) onlyShapes &= n.isConstant() || shapeOnly.count(n.op->name) != 0;
  if (onlyShapes) return "shape computation (reads no data)";
  bool onlyMoves = true, computes = false;
  for (const auto& n : f.nodes) {
    if (n.isConstant()) continue;
    onlyMoves &= moves.count(n.op->name) != 0;
    computes |= n.op->pattern == ops::OpPattern::CommReduce || n.op->pattern == ops::OpPattern::OutEWiseFusable ||
                n.op->pattern == ops::OpPattern::Opaque;
  }
  if (onlyMoves) return "copy or reshape (nothing computed)";
  if (computes) return "";
  // Element-wise (and injective): worth it only when big enough.
  int64_t out = 0;
  for (int32_t o : f.outputs) {
    const auto& t = f.typeOf(o);
    bool dynamic = std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; });
    if (dynamic) return "";  // decided per shape
    out += elements(Shape(t.shape.begin(), t.shape.end()));
  }
  return out < kTinyElements ? "tiny element-wise (< " + std::to_string(kTinyElements) + " elements)" : "";
}

bool elementWiseOnly(const FusedFunction& f) {
  for (const auto& n : f.nodes)
    if (!n.isConstant() && (n.op->pattern == ops::OpPattern::CommReduce || n.op->pattern == ops::OpPattern::OutEWiseFusable ||
                            n.op->pattern == ops::OpPattern::Opaque))
      return false;
  return true;
}

std::string opsOf(const FusedFunction& f) {
  std::string s;
  std::set<std::string> seen;
  for (const auto& n : f.nodes)
    if (!n.isConstant() && seen.insert(n.op->name).second) s += (s.empty() ? "" : ", ") + n.op->name;
  return s;
}

// Estimated work of one call: elements of every value computed.
double estimatedWork(const FusedFunction& f, const std::vector<Shape>& shapes) {
  try {
    double w = 0;
    for (const Shape& s : kernel_ir::computeShapes(f, shapes)) w += static_cast<double>(elements(s));
    return w;
  } catch (const Error&) {
    return 0;
  }
}

}  // namespace

TaskList extractTasks(const Executable& exe, const ExtractOptions& options) {
  TaskList list;
  std::set<std::string> done;
  for (uint32_t k = 0; k < exe.kernels().size(); ++k) {
    const FusedFunction& f = *exe.kernels()[k].function;
    std::string key = jit::taskKey(f);
    if (!done.insert(key).second) continue;  // the same kernel twice in one program
    std::string why = skipReason(f, exe.kernels()[k].kind);
    if (why.empty()) {
      // Nothing for a schedule to change (a kernel with no loops of its own).
      try {
        loop::LoopKernel loops = kernel_ir::lowerToLoops(f, {.directConv = true, .gemmPostOps = true, .splitBorders = true});
        if (loop::scheduleSpaceOf(loops).dimensions() == 0) why = "nothing a schedule changes";
      } catch (const Error&) {
        why = "not lowered by Kiln's code generator";
      }
    }
    if (!why.empty()) {
      list.skipped[why]++;
      continue;
    }
    bool dynamic = false;
    std::vector<Shape> declared;
    for (const auto& p : f.params) {
      declared.emplace_back(p.shape.begin(), p.shape.end());
      for (int64_t d : p.shape) dynamic |= d < 0;
    }
    auto addTask = [&](std::vector<Shape> shapes, uint64_t calls, double totalMicros) {
      if (elementWiseOnly(f)) {
        int64_t out = 0;
        try {
          auto all = kernel_ir::computeShapes(f, shapes);
          for (int32_t o : f.outputs) out += elements(all[static_cast<size_t>(o)]);
        } catch (const Error&) {
          list.skipped["recorded shapes the kernel does not accept"]++;
          return;
        }
        if (out < kTinyElements) {
          list.skipped["tiny element-wise (< " + std::to_string(kTinyElements) + " elements)"]++;
          return;
        }
      }
      Task t;
      t.kernel = k;
      t.name = f.name;
      t.task = key;
      t.ops = opsOf(f);
      t.dynamic = dynamic;
      t.calls = calls;
      t.micros = calls ? totalMicros / static_cast<double>(calls) : 0;
      t.weight = calls ? totalMicros : estimatedWork(f, shapes) * 1e-6;
      t.shapes = std::move(shapes);
      list.tasks.push_back(std::move(t));
    };
    bool recorded = false;
    for (const ShapeRecord& r : options.records) {
      if (r.task != key) continue;
      recorded = true;
      addTask(r.shapes, r.calls, r.totalMicros);
    }
    if (recorded) continue;
    if (!dynamic) {
      addTask(declared, 0, 0);
    } else if (options.maxDim > 0) {
      for (int64_t v = std::max<int64_t>(options.minDim, 1); v <= options.maxDim; v *= 2) {
        std::vector<Shape> shapes = declared;
        for (Shape& s : shapes)
          for (int64_t& d : s)
            if (d < 0) d = v;
        addTask(std::move(shapes), 0, 0);
      }
    } else {
      std::string types;
      for (size_t p = 0; p < f.params.size(); ++p) types += (p ? ", " : "") + ops::descToString(f.params[p]);
      list.unresolved.push_back(f.name + " (" + types + ")");
    }
  }
  std::stable_sort(list.tasks.begin(), list.tasks.end(), [](const Task& a, const Task& b) { return a.weight > b.weight; });
  return list;
}

void parseDimRange(const std::string& text, ExtractOptions& options) {
  size_t colon = text.find(':');
  int64_t lo = 0, hi = 0;
  bool ok = colon != std::string::npos;
  if (ok) {
    auto [p, ec] = std::from_chars(text.data(), text.data() + colon, lo);
    ok = ec == std::errc() && p == text.data() + colon;
  }
  if (ok) {
    auto [p, ec] = std::from_chars(text.data() + colon + 1, text.data() + text.size(), hi);
    ok = ec == std::errc() && p == text.data() + text.size();
  }
  if (!ok || lo < 1 || lo > hi || hi > (int64_t(1) << 30))
    throw Error("--dims needs LO:HI with 1 <= LO <= HI <= 2^30, got '" + text + "'");
  options.minDim = lo;
  options.maxDim = hi;
}

std::string TaskList::toString() const {
  size_t kernels = 0;
  std::set<std::string> distinct;
  for (const Task& t : tasks) distinct.insert(t.task);
  kernels = distinct.size();
  int skippedTotal = 0;
  for (auto& [why, n] : skipped) skippedTotal += n;
  std::string out = std::to_string(tasks.size()) + " task(s) from " + std::to_string(kernels) + " kernel(s); " +
                    std::to_string(skippedTotal) + " left out";
  std::string reasons;
  for (auto& [why, n] : skipped) reasons += (reasons.empty() ? "" : ", ") + std::to_string(n) + " " + why;
  if (!reasons.empty()) out += ": " + reasons;
  out += "\n";
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    char figures[160];
    if (t.calls)
      std::snprintf(figures, sizeof figures, "calls %llu, %.2f us each, weight %.1f us", static_cast<unsigned long long>(t.calls),
                    t.micros, t.weight);
    else
      std::snprintf(figures, sizeof figures, "not recorded, estimated work %.3g M elements", t.weight);
    out += "task " + std::to_string(i + 1) + "/" + std::to_string(tasks.size()) + " " + t.task + " " + t.name +
           (t.dynamic ? " (dynamic)" : "") + "\n  ops: " + t.ops + "\n  shapes: " + jit::formatShapes(t.shapes) + "\n  " +
           figures + "\n";
  }
  for (const std::string& u : unresolved)
    out += "unresolved: " + u + ": `?` dimensions with no recorded shapes (vmrun --record-shapes) or range (--dims)\n";
  return out;
}

}  // namespace kiln::tune
