// Reading a whole file a user named (a program, weights, inputs): a missing,
// unreadable or non-regular file (a directory, a device) is a kiln::Error that
// names it, never a stream error from deep inside the standard library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

std::vector<uint8_t> readFileBytes(const std::string& path);
std::string readFileText(const std::string& path);

}  // namespace kiln
