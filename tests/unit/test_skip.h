// Skipping a test case at run time, reported as skipped (see main.cc): a test
// case that cannot run here (no GPU, Kiln built without oneDNN) calls skip() and
// returns, and ctest shows it as skipped instead of passed.
#pragma once

#include <string>

namespace kiln::test {

// The exit status of a run whose test cases all skipped themselves (ctest's
// SKIP_RETURN_CODE for kiln_tests, in tests/CMakeLists.txt).
constexpr int kSkipExitCode = 77;

// Marks the running test case skipped and prints why.
void skip(const std::string& why);

}  // namespace kiln::test
