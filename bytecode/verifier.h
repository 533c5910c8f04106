// The loader's verifier (see verifier.cc for what it checks).
#pragma once

#include <vector>

#include "kiln/executable.h"

namespace kiln::bytecode {

// Both throw kiln::Error at the first problem.
// Kernel graphs: ids, operand counts, and every node typed as its operator's
// rule gives. Runs before kernels are classified or lowered, which trust types.
void verifyKernels(const Executable& exe);
// Constructors and the bytecode of every function; needs kernel kinds.
void verify(const Executable& exe);

// Per function, whether it is pure: no reference cells, no calls of closures
// (their functions are unknown here), no device copies, and calls (invoke,
// tail_call, fork) only of pure functions; the largest such set, so functions
// that recurse among themselves are pure when nothing else makes them not.
// Only a pure function may be forked (it may run beside the code up to its
// join, on another thread: it neither sees nor makes an effect that code could).
std::vector<bool> pureFunctions(const Executable& exe);

}  // namespace kiln::bytecode
