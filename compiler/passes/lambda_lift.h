// Lambda lifting (closure conversion), on a module in A-normal form.
//
// Every nested non-primitive `fn` becomes a global function:
//   - without free variables: `def @outer_lambda_N(params) { body }`, and the
//     lambda's value is the global `@outer_lambda_N` (a closure with nothing
//     captured);
//   - with free variables x, y: `def @outer_lambda_N(%x, %y) { /* closure */
//     fn (params) { body } }`, and the lambda's value is `@outer_lambda_N(%x, %y)`,
//     which builds the closure.
// A let-bound lambda that calls itself (`let %loop = fn (...) { ... %loop(...) }`)
// calls the global directly: `@outer_lambda_N(%x, %y, args...)` — no closure is
// built per iteration. Its other self-references rebuild the closure from the
// captured values. Constructors used as values (`@foldr(Cons, Nil, %xs)`) get a
// wrapper global `@Cons_fn(%a, %b) { Cons(%a, %b) }`. The result is still in ANF.
#pragma once

#include <memory>

#include "compiler/ir/module.h"

namespace kiln::compiler {

std::unique_ptr<ir::Module> lambdaLift(const ir::Module& m);

// For a global made by lifting with captured values: how many parameters are
// captured values (0 for other globals).
size_t capturedCount(const ir::Function* global);

}  // namespace kiln::compiler
