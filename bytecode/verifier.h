// The loader's verifier (see verifier.cc for what it checks).
#pragma once

#include "kiln/executable.h"

namespace kiln::bytecode {

// Throws kiln::Error ("invalid executable: ...") at the first problem.
void verify(const Executable& exe);

}  // namespace kiln::bytecode
