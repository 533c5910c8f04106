// kiln::Error: the one exception type Kiln raises for user-facing failures.
//
// Every failure caused by user input (a bad program, a corrupt executable, a wrong
// input shape, a run-time `match?` failure) is reported as a kiln::Error; nothing
// aborts the process on user input. An error may carry a source location; what()
// then reads `file:line:col: error: message`, the form editors and tests expect.
// Errors are plain values: cheap to copy, safe to rethrow across threads.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kiln {

// A position in a source file. Lines and columns count from 1; 0 means "unknown".
struct SourceLoc {
  uint32_t line = 0;
  uint32_t col = 0;
  bool known() const { return line != 0; }
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error("error: " + message), message_(message) {}
  Error(const std::string& file, SourceLoc loc, const std::string& message)
      : std::runtime_error(format(file, loc, message)), message_(message), file_(file), loc_(loc) {}

  // The message without location and without the "error: " prefix.
  const std::string& message() const { return message_; }
  const std::string& file() const { return file_; }
  SourceLoc loc() const { return loc_; }

 private:
  static std::string format(const std::string& file, SourceLoc loc, const std::string& message) {
    std::string out = file.empty() ? std::string("<input>") : file;
    if (loc.known()) out += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
    return out + ": error: " + message;
  }

  std::string message_;
  std::string file_;
  SourceLoc loc_;
};

}  // namespace kiln
