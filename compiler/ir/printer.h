// Printer: IR back to Relay text that parses to an equal module (round trip).
//
// Variable names are kept, made unique within each global function where two
// distinct variables share one (`%x`, `%x_1`), so the text never depends on
// shadowing. With `showTypes`, parameters, results and bindings carry their
// checked types (bindings as `/* ty=... */` comments after graph-style values).
// Prelude definitions are left out unless asked for; the parser supplies them.
#pragma once

#include <functional>
#include <string>

#include "compiler/ir/module.h"

namespace kiln::ir {

struct PrintOptions {
  bool showTypes = false;
  bool includePrelude = false;
  // A note on binders and block results (kilnc --emit devices: the device):
  // printed as `/* note */` after a parameter and `// note` after a binding or
  // a block's final expression. Empty: nothing printed.
  std::function<std::string(const Expr*)> note;
  // A note on calls (kilnc --emit annotated: the library), printed as
  // `/* note */` after the call. Empty: nothing printed.
  std::function<std::string(const Expr*)> callNote;
};

std::string printModule(const Module& m, const PrintOptions& opts = {});
std::string printExpr(const Expr* e, const PrintOptions& opts = {});
std::string literalToString(const Constant* c);

}  // namespace kiln::ir
