// Round trip: printing a module and parsing the text back gives an equal module,
// for every .relay file under tests/ and samples/ (with the files its `// WITH:`
// line names put before it, as tests/cli/e2e_test.sh does) and every .rly file of
// TVM's standard library kept in tests/tvm/std, with and without types.
#include <filesystem>
#include <sstream>

#include "compiler/ir/equal.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

std::vector<fs::path> relayFiles() {
  std::vector<fs::path> out;
  for (const char* dir : {"tests", "samples"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(KILN_SOURCE_DIR) / dir))
      if (e.is_regular_file() && (e.path().extension() == ".relay" || e.path().extension() == ".rly"))
        out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The program text as the e2e runner assembles it: `// WITH:` files first, their
// `#[version]` lines dropped after the first.
std::string assemble(const fs::path& path) {
  std::string src = compiler::readSourceFile(path.string());
  size_t at = src.find("\n// WITH: ");
  if (at == std::string::npos) return src;
  std::istringstream names(src.substr(at + 10, src.find('\n', at + 1) - at - 10));
  std::string out, name;
  bool first = true;
  auto append = [&](const std::string& text) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      if (first || line.rfind("#[version", 0) != 0) out += line + "\n";
    first = false;
  };
  while (names >> name) append(compiler::readSourceFile((fs::path(KILN_SOURCE_DIR) / name).string()));
  append(src);
  return out;
}

std::string print(const ir::Module& m, bool types) {
  ir::PrintOptions o;
  o.showTypes = types;
  return compiler::onCompilerStack([&] { return ir::printModule(m, o); });
}

}  // namespace

TEST_CASE("every .relay file under tests/ and samples/ round-trips") {
  auto files = relayFiles();
  REQUIRE(files.size() >= 6);
  for (const fs::path& path : files) {
    CAPTURE(path.string());
    std::string src = assemble(path);
    auto original = compiler::loadProgram(src, path.string());

    // Untyped: the text parses back to a structurally equal module, and prints the same.
    std::string text = print(*original, false);
    auto reparsed = compiler::loadProgram(text, "printed.relay");
    CHECK(ir::moduleDifference(*original, *reparsed) == "");
    CHECK(print(*reparsed, false) == text);

    // Typed (`kilnc --emit ir`): the annotated text checks to the same types and is a fixed point.
    std::string typed = print(*original, true);
    auto retyped = compiler::loadProgram(typed, "typed.relay");
    CHECK(print(*retyped, true) == typed);
  }
}

TEST_CASE("round trip keeps literals, attributes and shadowed names apart") {
  auto m = test::check(
      "def @main(%x: Tensor[(2, 3), float32]) {\n"
      "  let %x = %x * 1e-05f;\n"
      "  let %x = clip(%x, a_min=-1.5f, a_max=6f);\n"
      "  (sum(%x, axis=[0, 1], keepdims=True, exclude=False), 3i64, -7i8, 255u8, 0.1f64, True)\n"
      "}");
  std::string text = print(*m, false);
  CHECK(text.find("let %x_1 = multiply(%x, 1e-05f);") != std::string::npos);
  CHECK(text.find("clip(%x_1, a_min=-1.5f, a_max=6f)") != std::string::npos);
  CHECK(text.find("sum(%x_2, axis=[0, 1], keepdims=True, exclude=False)") != std::string::npos);
  CHECK(text.find("(3i64, -7i8, 255u8, 0.10000000000000001f64, True)") == std::string::npos);
  CHECK(text.find("3i64, -7i8, 255u8, 0.10000000000000001f64, True)") != std::string::npos);
  auto again = compiler::loadProgram(text, "again.relay");
  CHECK(ir::moduleDifference(*m, *again) == "");
}

TEST_CASE("structural equality sees a changed program") {
  auto a = test::check("def @main(%x: float32) { %x + 1f }");
  auto b = test::check("def @main(%y: float32) { %y + 1f }");
  auto c = test::check("def @main(%x: float32) { %x + 2f }");
  auto d = test::check("def @main(%x: float32) { %x - 1f }");
  CHECK(ir::moduleDifference(*a, *b) == "");
  CHECK(ir::moduleDifference(*a, *c) == "function @main differs");
  CHECK(ir::moduleDifference(*a, *d) == "function @main differs");
}

TEST_CASE("every truncation of every program is an error or a program, never a crash") {
  size_t errors = 0, accepted = 0;
  for (const fs::path& path : relayFiles()) {
    std::string src = compiler::readSourceFile(path.string());
    // Every 7th prefix, plus the single bytes that most often break parsers.
    for (size_t n = 0; n < src.size(); n += 7) {
      try {
        compiler::loadProgram(src.substr(0, n), "cut.relay");
        ++accepted;
      } catch (const Error& e) {
        CHECK(std::string(e.what()).rfind("cut.relay:", 0) == 0);
        ++errors;
      }
    }
  }
  CHECK(errors > 100);
  CHECK(accepted >= 1);  // the empty program
}
