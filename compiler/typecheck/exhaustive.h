// Exhaustiveness of `match`: finds a value no clause matches, if there is one.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "compiler/ir/expr.h"

namespace kiln::typecheck {

// `scrutinee` must be fully inferred. Returns a description of an unmatched value
// (`Nil`, `Cons(_, Nil)`, `(Some(_), _)`), or nullopt when every value matches.
std::optional<std::string> findUnmatched(std::span<const ir::Clause> clauses, const ir::Type* scrutinee,
                                         ir::Arena& arena);

}  // namespace kiln::typecheck
