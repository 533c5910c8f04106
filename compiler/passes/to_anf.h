// A-normal form: every intermediate value is let-bound, in a fixed order.
//
// After this pass, in every non-primitive function:
//   - operands of calls, tuples, field accesses and conditions are atoms (a
//     variable, a global, a scalar literal or a constructor); a callee is an atom
//     or a primitive function;
//   - the body of a function, an if branch or a match clause is a chain of lets
//     ending in one value, which may itself be a call (so tail calls stay in tail
//     position);
//   - evaluation order is the order of the lets: a call's callee, then its
//     arguments left to right; a tuple's fields left to right; nested lets are
//     flattened into the enclosing chain in the order they appear.
// Primitive functions (kernels) are left as they are. Types carry over; new
// variables get the type of the expression they bind.
#pragma once

#include <memory>

#include "compiler/ir/module.h"

namespace kiln::compiler {

std::unique_ptr<ir::Module> toANF(const ir::Module& m);

// True when `e` may appear where ANF wants an atom.
bool isAtom(const ir::Expr* e);

}  // namespace kiln::compiler
