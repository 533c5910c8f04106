// Deep programs: 100,000 chained lets and an expression nested 10,000 deep parse,
// type-check and print (also under the sanitizer build, on the default stack).
#include <chrono>

#include "compiler/ir/equal.h"
#include "test_util.h"

using namespace kiln;

namespace {

std::string letChain(int n, bool graphStyle) {
  std::string s = "def @main(%x: Tensor[(4,), float32]) {\n";
  s.reserve(static_cast<size_t>(n) * 40);
  for (int i = 0; i < n; ++i) {
    std::string prev = i == 0 ? "%x" : (graphStyle ? "%" : "%v") + std::to_string(i - 1);
    if (graphStyle) s += "  %" + std::to_string(i) + " = add(" + prev + ", 1f);\n";
    else s += "  let %v" + std::to_string(i) + " = " + prev + " * 2f;\n";
  }
  s += graphStyle ? "  %" + std::to_string(n - 1) + "\n}\n" : "  %v" + std::to_string(n - 1) + "\n}\n";
  return s;
}

std::string nestedCalls(int depth) {
  std::string s = "def @main(%x: Tensor[(4,), float32]) {\n  ";
  for (int i = 0; i < depth; ++i) s += "add(";
  s += "%x";
  for (int i = 0; i < depth; ++i) s += ", 1f)";
  return s + "\n}\n";
}

std::string nestedParens(int depth) {
  return "def @main(%x: int32) { " + std::string(static_cast<size_t>(depth), '(') + "%x + 1" +
         std::string(static_cast<size_t>(depth), ')') + " }";
}

void checkRoundTrip(const std::string& src) {
  auto m = compiler::loadProgram(src, "deep.relay");
  std::string text = compiler::onCompilerStack([&] { return ir::printModule(*m); });
  auto again = compiler::loadProgram(text, "deep2.relay");
  CHECK(ir::moduleDifference(*m, *again) == "");
}

}  // namespace

TEST_CASE("100,000 chained lets parse, type-check and print") {
  checkRoundTrip(letChain(100000, false));
  CHECK(test::mainResult(letChain(100000, false)) == "Tensor[(4,), float32]");
}

TEST_CASE("100,000 graph-style bindings parse, type-check and print") {
  checkRoundTrip(letChain(100000, true));
}

TEST_CASE("an expression nested 10,000 deep parses, type-checks and prints") {
  checkRoundTrip(nestedCalls(10000));
  CHECK(test::mainResult(nestedCalls(10000)) == "Tensor[(4,), float32]");
  CHECK(test::mainResult(nestedParens(10000)) == "int32");
}

TEST_CASE("nesting past the parser's limit is a clean error, not a crash") {
  std::string err = test::errorOf(nestedParens(30000));
  CHECK(err.find("t.relay:1:") == 0);
  CHECK(err.find("error: expression nested too deeply (more than 25000 levels)") != std::string::npos);
}
