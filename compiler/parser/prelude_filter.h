// The prelude a program sees. The prelude provides only what the program does
// not define: a prelude definition is left out when the program defines the same
// name (its own @sum, @id, type List, ...) and when it uses a definition left out
// (the prelude's @map over its List goes with the List), so the prelude never
// breaks around a program's definitions. Left-out definitions are blanked in
// place, so every prelude line and column (named in match failures) stays put.
#pragma once

#include <string>
#include <string_view>

namespace kiln::parser {

// The prelude's text for `program` (the whole prelude when the program defines
// none of its names, or does not lex: its parse then reports the error).
std::string preludeFor(std::string_view program);

}  // namespace kiln::parser
