// Reading a whole file a user named (a program, weights, inputs): a missing,
// unreadable or non-regular file (a directory, a device) is a kiln::Error that
// names it, never a stream error from deep inside the standard library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

std::vector<uint8_t> readFileBytes(const std::string& path);

// A whole regular file mapped read-only (read into memory where it cannot be
// mapped): its bytes are valid while the object lives. For large inputs a parser
// reads in place (an ONNX model's weights are then copied once, not twice).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> fallback_;
};
std::string readFileText(const std::string& path);

}  // namespace kiln
