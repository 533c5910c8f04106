// Type inference for a whole module.
//
// Fills in the checked type of every expression and variable, using each
// operator's shape rule (ops/), instantiating polymorphic globals and
// constructors per use, and checking every `match` for exhaustiveness. Types
// that differ only in dimension sizes meet as `?` (see solver.h). Errors are
// kiln::Error at the offending expression's location and say what was expected
// and what was found.
#pragma once

#include "compiler/ir/module.h"

namespace kiln::typecheck {

void inferTypes(ir::Module& module);

}  // namespace kiln::typecheck
