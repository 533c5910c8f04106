// Tuning logs: parsing, formatting and the nearest-shape lookup.
#include "jit/tuning_log.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/read_file.h"
#include "jit/host_cpu.h"
#include "kiln/error.h"

namespace kiln::jit {

std::string taskKey(const kernel_ir::FusedFunction& f) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(f.contentHash()));
  return buf;
}

std::string formatShapes(std::span<const Shape> shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) s += ';';
    if (shapes[i].empty()) s += "scalar";
    for (size_t d = 0; d < shapes[i].size(); ++d) s += (d ? "x" : "") + std::to_string(shapes[i][d]);
  }
  return s;
}

std::optional<std::vector<Shape>> parseShapes(std::string_view text) {
  std::vector<Shape> out;
  if (text.empty()) return out;
  for (;;) {
    size_t semi = text.find(';');
    std::string_view one = text.substr(0, semi);
    Shape shape;
    if (one != "scalar") {
      for (;;) {
        size_t x = one.find('x');
        std::string_view d = one.substr(0, x);
        int64_t v = 0;
        auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
        // Dimensions and ranks within what a tensor type may have (ops::kMaxDimension).
        if (ec != std::errc() || p != d.data() + d.size() || v < 0 || v > (int64_t(1) << 40) || shape.size() >= 64)
          return std::nullopt;
        shape.push_back(v);
        if (x == std::string_view::npos) break;
        one.remove_prefix(x + 1);
      }
    }
    out.push_back(std::move(shape));
    if (semi == std::string_view::npos) break;
    text.remove_prefix(semi + 1);
  }
  return out;
}

std::string TuningLog::format(const TuningRecord& r) {
  char times[96];
  std::snprintf(times, sizeof times, " us=%.3f default_us=%.3f", r.micros, r.defaultMicros);
  std::string program;
  if (r.checkedInProgram()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " program_us=%.3f program_default_us=%.3f", r.programMicros, r.programDefaultMicros);
    program = buf;
  }
  return "task=" + r.task + " shapes=" + formatShapes(r.shapes) + " schedule=" + r.schedule.toString() + times + program +
         " machine=" + (r.machine.empty() ? "-" : r.machine) + " cpu=" + r.cpu;
}

TuningLog TuningLog::load(const std::string& path) { return parse(readFileText(path), path); }

TuningLog TuningLog::parse(std::string_view text, const std::string& name) {
  TuningLog log;
  size_t lineNo = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    auto fail = [&](const std::string& why) {
      throw Error("tuning log " + name + ":" + std::to_string(lineNo) + ": " + why);
    };
    TuningRecord r;
    // The first seven are required; the in-program pair goes together or not at all.
    constexpr int kKeys = 9, kRequired = 7;
    bool have[kKeys] = {};
    static const char* const keys[kKeys] = {"task",    "shapes", "schedule",   "us",
                                            "default_us", "machine", "cpu", "program_us", "program_default_us"};
    line.remove_prefix(first);
    while (!line.empty()) {
      size_t sp = line.find(' ');
      std::string_view field = line.substr(0, sp);
      size_t next = line.find_first_not_of(' ', sp == std::string_view::npos ? line.size() : sp);
      line = next == std::string_view::npos ? std::string_view() : line.substr(next);
      size_t eq = field.find('=');
      if (eq == std::string_view::npos) fail("'" + std::string(field) + "' is not key=value");
      std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
      int which = -1;
      for (int i = 0; i < kKeys; ++i)
        if (key == keys[i]) which = i;
      if (which < 0) fail("unknown field '" + std::string(key) + "'");
      if (have[which]) fail("field '" + std::string(key) + "' given twice");
      have[which] = true;
      auto number = [&](double& out) {
        auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
        if (ec != std::errc() || p != value.data() + value.size() || !(out >= 0) || !std::isfinite(out))
          fail("'" + std::string(key) + "' is not a time: '" + std::string(value) + "'");
      };
      switch (which) {
        case 0:
          if (value.size() != 16 || value.find_first_not_of("0123456789abcdef") != std::string_view::npos)
            fail("task '" + std::string(value) + "' is not 16 hex digits");
          r.task = value;
          break;
        case 1: {
          auto shapes = parseShapes(value);
          if (!shapes) fail("bad shapes '" + std::string(value) + "'");
          r.shapes = std::move(*shapes);
          break;
        }
        case 2: {
          std::string why;
          auto s = loop::Schedule::parse(value, &why);
          if (!s) fail(why);
          r.schedule = std::move(*s);
          break;
        }
        case 3: number(r.micros); break;
        case 4: number(r.defaultMicros); break;
        case 5: r.machine = value; break;
        case 6: r.cpu = value; break;
        case 7: number(r.programMicros); break;
        case 8: number(r.programDefaultMicros); break;
      }
    }
    for (int i = 0; i < kRequired; ++i)
      if (!have[i]) fail(std::string("missing field '") + keys[i] + "'");
    if (have[7] != have[8]) fail("'program_us' and 'program_default_us' go together");
    log.add(std::move(r));
  }
  return log;
}

void TuningLog::noteForeign(const TuningRecord& r) {
  ++foreign_;
  std::string who = r.machine + " (cpu " + r.cpu + ")";
  bool known = false;
  for (const std::string& m : foreignMachines_) known |= m == who;
  if (!known) foreignMachines_.push_back(who);
  notes_.clear();
  std::string list;
  for (size_t i = 0; i < foreignMachines_.size(); ++i) list += (i ? ", " : "") + foreignMachines_[i];
  notes_.push_back(std::to_string(foreign_) + " tuning record(s) measured on another CPU are ignored: " + list +
                   "; this machine is cpu " + hostCpuFingerprint());
}

void TuningLog::add(TuningRecord r) {
  if (r.cpu != hostCpuFingerprint()) {
    noteForeign(r);
    return;
  }
  // The latest check of a schedule in its program decides whether it lost there.
  if (r.checkedInProgram()) {
    if (r.lostInProgram()) lost_.insert(lostKey(r));
    else lost_.erase(lostKey(r));
  }
  bool lost = lostInProgram(r);
  std::vector<size_t>& mine = byTask_[r.task];
  for (size_t i : mine) {
    TuningRecord& had = records_[i];
    if (had.shapes != r.shapes) continue;
    // A schedule that lost in its program gives way to any that did not; among
    // those the fastest alone wins; the same schedule again keeps its record,
    // with the in-program figures of the latest check.
    bool hadLost = lostInProgram(had);
    if (had.schedule == r.schedule) {
      if (r.checkedInProgram()) {
        had.programMicros = r.programMicros;
        had.programDefaultMicros = r.programDefaultMicros;
      }
    } else if ((hadLost && !lost) || (hadLost == lost && r.micros < had.micros)) {
      had = std::move(r);
    }
    return;
  }
  mine.push_back(records_.size());
  records_.push_back(std::move(r));
}

std::string TuningLog::lostKey(const TuningRecord& r) {
  return r.task + " " + formatShapes(r.shapes) + " " + r.schedule.toString();
}

bool TuningLog::lostInProgram(const TuningRecord& r) const { return lost_.count(lostKey(r)) != 0; }

const TuningRecord* TuningLog::find(const std::string& task, std::span<const Shape> shapes) const {
  auto it = byTask_.find(task);
  if (it == byTask_.end()) return nullptr;
  for (size_t i : it->second)
    if (std::equal(records_[i].shapes.begin(), records_[i].shapes.end(), shapes.begin(), shapes.end()))
      return &records_[i];
  return nullptr;
}

std::optional<loop::Schedule> TuningLog::lookup(const std::string& task, std::span<const Shape> shapes) const {
  auto it = byTask_.find(task);
  if (it == byTask_.end()) return std::nullopt;
  // These very shapes lost with their schedule: the default, not a neighbour's.
  if (const TuningRecord* exact = find(task, shapes); exact && lostInProgram(*exact)) return std::nullopt;
  const TuningRecord* best = nullptr;
  double bestDistance = std::numeric_limits<double>::infinity();
  for (size_t i : it->second) {
    const TuningRecord& r = records_[i];
    if (r.shapes.size() != shapes.size() || lostInProgram(r)) continue;
    double distance = 0;
    bool comparable = true;
    for (size_t p = 0; p < shapes.size() && comparable; ++p) {
      if (r.shapes[p].size() != shapes[p].size()) comparable = false;
      for (size_t d = 0; comparable && d < shapes[p].size(); ++d)
        distance += std::fabs(std::log2(double(std::max<int64_t>(r.shapes[p][d], 1))) -
                              std::log2(double(std::max<int64_t>(shapes[p][d], 1))));
    }
    if (comparable && distance < bestDistance) {
      bestDistance = distance;
      best = &r;
    }
  }
  if (!best) return std::nullopt;
  return best->schedule;
}

}  // namespace kiln::jit
