// Helpers shared by the tools (vmrun, kilnc, kiln-tune): device lists, the memory and device listings, inputs.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bytecode/opcodes.h"
#include "compiler/ir/printer.h"
#include "compiler/frontend.h"
#include "compiler/passes/device_placement.h"
#include "compiler/pipeline.h"
#include "kiln/compile.h"
#include "device/cuda_driver.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/tensor.h"
#include "kiln/value.h"

namespace kiln::tools {

// An input as the program takes it: a scalar is a register value (loops over it
// allocate nothing), anything else the tensor.
inline Value inputValue(const Tensor& t) {
  if (t.rank() != 0) return Value(t);
  int64_t i = 0;
  double f = 0;
  readScalar(t.data(), t.dtype(), i, f);
  return isFloat(t.dtype()) ? Value::floatScalar(t.dtype(), f) : Value::intScalar(t.dtype(), i);
}

// Parses `cpu,cpu:1,cuda`. With `toRun`, a GPU must be usable here: CUDA is
// refused with the reason (no driver, no GPU). Compiling for one needs neither:
// kernels are generated where the executable runs.
inline std::vector<Device> checkDevices(const std::string& list, bool toRun) {
  std::vector<Device> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    std::string name = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    Device d = Device::parse(name);
    if (d.isGpu() && toRun) {
      std::string why = device::cudaUnavailableReason(d);
      if (!why.empty()) throw Error("--device " + name + ": " + why);
    }
    out.push_back(d);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// --partition LIBS (comma-separated) and --patterns FILE...: the libraries to
// partition for and the pattern files that describe them.
inline void setPartitionOptions(const std::string& libs, const std::vector<std::string>& patternFiles, CompileOptions& o) {
  size_t start = 0;
  while (!libs.empty() && start <= libs.size()) {
    size_t end = libs.find(',', start);
    std::string name = libs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (name.empty()) throw Error("--partition needs library names separated by commas, got '" + libs + "'");
    o.partition.push_back(name);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (o.partition.empty() && !patternFiles.empty()) throw Error("--patterns needs --partition LIBRARY");
  for (const std::string& f : patternFiles) o.partitionPatterns.emplace_back(f, compiler::readSourceFile(f));
}

// --emit composite / annotated / regions / partitioned: a partitioning stage,
// annotated calls marked with their library (and region), notes at the end.
inline std::string partitionListing(const compiler::Stages& s, const std::string& emit) {
  if (!s.partitioned) throw Error("--emit " + emit + " needs --partition LIBRARY");
  ir::PrintOptions opts;
  opts.showTypes = true;
  if (emit == "annotated" || emit == "regions")
    opts.callNote = [&](const ir::Expr* e) {
      std::string d = s.regions.describe(e);
      return emit == "annotated" ? d.substr(0, d.find(' ')) : d;
    };
  std::string out = ir::printModule(emit == "partitioned" ? *s.partitioned : *s.composite, opts);
  if (emit == "regions") {
    out += "\n// " + std::to_string(s.regions.regions.size()) + " region" + (s.regions.regions.size() == 1 ? "" : "s") + "\n";
    for (size_t i = 0; i < s.regions.regions.size(); ++i) {
      const partition::Region& r = s.regions.regions[i];
      out += "//   region " + std::to_string(i) + ": " + r.library + " in @" + r.function + ", " + std::to_string(r.members.size()) +
             " call" + (r.members.size() == 1 ? "" : "s") + "\n";
    }
  }
  for (const std::string& n : s.partitionNotes) out += "// note: " + n + "\n";
  return out;
}

// --emit devices: the placed program, each binding, parameter and block result
// followed by its device, then the copies placement inserted and the
// specializations it made.
inline std::string devicesListing(const compiler::Placement& p) {
  ir::PrintOptions opts;
  opts.includePrelude = true;  // placed prelude functions carry devices too (only those used remain)
  opts.note = [&](const ir::Expr* e) {
    auto it = p.plan.of.find(e);
    return it == p.plan.of.end() ? std::string() : it->second.toString();  // kernel bodies: their call's device
  };
  std::string out = ir::printModule(*p.module, opts);
  out += "\n// devices: " + p.plan.defaultDevice.toString() + " (default)";
  for (Device d : p.plan.devices)
    if (!(d == p.plan.defaultDevice)) out += ", " + d.toString();
  out += "; host " + p.plan.host.toString() + "\n";
  out += "// " + std::to_string(p.copies.size()) + " cop" + (p.copies.size() == 1 ? "y" : "ies") + " inserted\n";
  for (const auto& c : p.copies) out += "//   @" + c.function + ": " + c.value + " " + c.src.toString() + " -> " + c.dst.toString() + "\n";
  out += "// " + std::to_string(p.specializations.size()) + " specialization" + (p.specializations.size() == 1 ? "" : "s");
  for (const auto& s : p.specializations) out += (&s == &p.specializations.front() ? ": @" : ", @") + s;
  out += "\n";
  return out;
}

// The memory-related instructions of each function (kilnc --emit memory).
// --emit memory: per function, the instructions that allocate, place, move
// (^r: a value's last use moves it into a call or constructor) or release,
// then a summary: storages, tensors placed, and how many share a storage.
inline std::string memoryListing(const Executable& exe) {
  std::string out;
  for (uint32_t f = 0; f < exe.functions().size(); ++f) {
    std::string text = exe.disassemble(f);
    size_t nl = text.find('\n');
    std::string body;
    size_t storages = 0, tensors = 0, releases = 0, moves = 0;
    std::map<std::string, size_t> placedIn;  // storage register -> tensors placed since its alloc_storage
    size_t shared = 0;
    for (size_t at = nl + 1; at < text.size();) {
      size_t e = text.find('\n', at);
      std::string line = text.substr(at, e - at);
      at = e + 1;
      bool keep = line.find("^r") != std::string::npos;
      for (const char* m : {"alloc_", "shape_func", "release", "reshape", "invoke_kernel", "invoke_dynamic", "device_copy"})
        keep |= line.find(m) != std::string::npos;
      if (!keep) continue;
      body += line + "\n";
      for (size_t p = line.find("^r"); p != std::string::npos; p = line.find("^r", p + 1)) ++moves;
      if (line.find("release ") != std::string::npos) ++releases;
      auto operand = [&](const char* op, int k) {  // the k-th comma-separated operand after `op`
        size_t p = line.find(op);
        std::string rest = line.substr(p + std::strlen(op));
        for (int i = 0; i < k; ++i) rest = rest.substr(rest.find(',') + 2);
        return rest.substr(0, rest.find(','));
      };
      if (line.find("alloc_tensor_own") != std::string::npos) {  // a storage of its own, one tensor in it
        ++storages;
        ++tensors;
      } else if (line.find("alloc_storage") != std::string::npos) {
        ++storages;
        placedIn[operand("alloc_storage", 0).substr(1)] = 0;
      } else if (line.find("alloc_tensor") != std::string::npos) {
        ++tensors;
        std::string reg = operand(line.find("alloc_tensor_reg") != std::string::npos ? "alloc_tensor_reg " : "alloc_tensor ", 1);
        if (++placedIn[reg] == 2) shared += 2;
        else if (placedIn[reg] > 2) ++shared;
      }
    }
    if (body.empty()) continue;
    out += text.substr(0, nl + 1) + body;
    out += "    // " + std::to_string(storages) + " storages, " + std::to_string(tensors) + " tensors placed (" +
           std::to_string(shared) + " in shared storage), " + std::to_string(releases) + " releases, " +
           std::to_string(moves) + " moves\n\n";
  }
  return out;
}

}  // namespace kiln::tools
