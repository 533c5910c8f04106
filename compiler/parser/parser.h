// Parser for the Relay text format (shared/spec/language.md) into Kiln's IR.
//
// parseInto adds a source file's type definitions and functions to a module; a
// definition replaces an earlier one of the same name (how a program overrides
// the prelude). Globals, types and constructors may be used before their
// definition. Errors are kiln::Error with `file:line:col` and say what was
// expected and what was found.
//
// Let chains are parsed with a loop; other nesting recurses, bounded by
// kMaxNesting, beyond which parsing stops with a clear error. Callers run the
// front end on a thread with a large stack (see frontend.h). The bound lets a
// 10,000-deep expression parse with room to spare while the deepest error still
// unwinds cleanly under AddressSanitizer (which gives up past 64 MB of stack).
#pragma once

#include <string>
#include <string_view>

#include "compiler/ir/module.h"

namespace kiln::parser {

inline constexpr int kMaxNesting = 25000;

void parseInto(ir::Module& module, std::string_view source, const std::string& file, bool fromPrelude = false);

}  // namespace kiln::parser
