// The prelude: List, Option, Tree and the list and tree functions every program
// sees without defining them (TVM's prelude, with the same types).
#pragma once

#include <string_view>

namespace kiln::parser {

std::string_view preludeSource();

}  // namespace kiln::parser
