// Helpers shared by the front-end unit tests.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "compiler/frontend.h"
#include "compiler/ir/printer.h"
#include "kiln/error.h"

namespace kiln::test {

// Parses and type-checks `src` (with the prelude) as file "t.relay".
inline std::unique_ptr<ir::Module> check(const std::string& src) { return compiler::loadProgram(src, "t.relay"); }

// The checked result type of @main in `src`.
inline std::string mainResult(const std::string& src) {
  auto m = check(src);
  const ir::GlobalFunction* f = m->findFunction("main");
  REQUIRE(f != nullptr);
  return ir::typeToString(ir::asFunc(f->var->type)->result);
}

// The message of the kiln::Error that checking `src` raises ("" if none).
inline std::string errorOf(const std::string& src) {
  try {
    check(src);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message of the kiln::Error that `f` throws ("" if none).
inline std::string thrownBy(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kiln::test
