// Helpers shared by vmrun and kilnc: device lists and the memory listing.
#pragma once

#include <string>
#include <vector>

#include "bytecode/opcodes.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/tensor.h"

namespace kiln::tools {

// Parses `cpu,cpu:1,cuda`; CUDA is refused clearly until the CUDA backend lands.
inline std::vector<Device> checkDevices(const std::string& list) {
  std::vector<Device> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    std::string name = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    Device d = Device::parse(name);
    if (d.kind == Device::Kind::CUDA)
      throw Error("--device " + name + ": this build of Kiln has no CUDA backend yet; use cpu");
    out.push_back(d);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The memory-related instructions of each function (kilnc --emit memory).
inline std::string memoryListing(const Executable& exe) {
  std::string out;
  for (uint32_t f = 0; f < exe.functions.size(); ++f) {
    std::string text = exe.disassemble(f);
    size_t nl = text.find('\n');
    std::string body;
    for (size_t at = nl + 1; at < text.size();) {
      size_t e = text.find('\n', at);
      std::string line = text.substr(at, e - at);
      for (const char* m : {"alloc_", "shape_func", "release", "reshape", "invoke_kernel", "invoke_dynamic", "device_copy"})
        if (line.find(m) != std::string::npos) {
          body += line + "\n";
          break;
        }
      at = e + 1;
    }
    if (!body.empty()) out += text.substr(0, nl + 1) + body + "\n";
  }
  return out;
}

}  // namespace kiln::tools
