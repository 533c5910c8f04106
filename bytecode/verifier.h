// The loader's verifier (see verifier.cc for what it checks).
#pragma once

#include "kiln/executable.h"

namespace kiln::bytecode {

// Both throw kiln::Error at the first problem.
// Kernel graphs: ids, operand counts, and every node typed as its operator's
// rule gives. Runs before kernels are classified or lowered, which trust types.
void verifyKernels(const Executable& exe);
// Constructors and the bytecode of every function; needs kernel kinds.
void verify(const Executable& exe);

}  // namespace kiln::bytecode
