// Structural equality of modules and expressions, up to the renaming of bound
// variables and type parameters (alpha-equivalence). Used by the round-trip tests
// and by passes that want to know whether a rewrite changed anything.
#pragma once

#include <string>

#include "compiler/ir/module.h"

namespace kiln::ir {

// Empty when equal; otherwise a short description of the first difference.
std::string moduleDifference(const Module& a, const Module& b, bool includePrelude = false);
bool structurallyEqual(const Expr* a, const Expr* b);

}  // namespace kiln::ir
