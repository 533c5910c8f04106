// doctest's main for the unit tests, with two rules for runs by name (ctest runs
// each test case as `kiln_tests --test-case=NAME`):
// - a name that matches no test case fails the run. ctest's discovery cuts a
//   name at ';', and such a test used to run nothing and pass.
// - a run whose every test case skipped itself (kiln::test::skip: no GPU, no
//   oneDNN) exits with kSkipExitCode, which ctest reports as skipped, not passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "test_skip.h"

namespace {

struct RunCounts {
  unsigned matched = 0;  // test cases passing the filters
  unsigned started = 0;  // test cases entered
  unsigned skipped = 0;  // of those, ones that called kiln::test::skip
  bool currentSkipped = false;
} counts;

// Listens beside the console reporter: counts what ran and what skipped itself.
struct RunCounter : doctest::IReporter {
  explicit RunCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { counts.matched = s.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {
    ++counts.started;
    counts.currentSkipped = false;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override { counts.skipped += counts.currentSkipped ? 1 : 0; }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("run_counter", 1, RunCounter);

bool namedRun(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    for (const char* flag : {"--test-case=", "-tc=", "--dt-test-case=", "--dt-tc="})
      if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) return true;
  return false;
}

}  // namespace

void kiln::test::skip(const std::string& why) {
  counts.currentSkipped = true;
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit() || rc != 0 || !namedRun(argc, argv)) return rc;
  if (counts.matched == 0) {
    std::fprintf(stderr, "kiln_tests: no test case has the name given (a name cut short?)\n");
    return 1;
  }
  if (counts.started > 0 && counts.skipped == counts.started) return kiln::test::kSkipExitCode;
  return rc;
}
