// hoistLoopProjections: the input projection of a loop, computed for every step
// at once before the loop, as ONNX Runtime's and cuDNN's LSTM operators do.
//
// A local recursive function that counts with one of its parameters (`%loop(%t
// + 1, ...)` in its body) and computes `nn.dense(take(%xs, %t, axis=0), %w)`,
// where %xs (a 3-D tensor [steps, rows, k] with static rows and k) and %w are
// bound outside the function, computes one row block of the same product every
// step, streaming all of %w each time. The pass binds the whole product once,
// right before the function is defined —
//   %proj = reshape(nn.dense(reshape(%xs, [-1, k]), %w), [-1, rows, n])
// — and the step takes its block: `take(%proj, %t, axis=0)` (same index mode, so
// an index out of range is treated exactly as before). One matrix product with
// the weights read once replaces a matrix-vector product per step; the loop's
// remaining product (the recurrent one) keeps the cache to itself.
//
// Values are those of the rewritten program up to the summation order of the
// product. Functions that do not count, products whose operands are computed
// inside the loop, and primitive functions are left alone, as is a projection
// known to exceed 256 MiB. A loop that stops early still pays for every step's
// block, and with `?` steps the block's size is known only at run time (a pool
// limit then reports it as any allocation).
#pragma once

#include <memory>

#include "compiler/ir/module.h"

namespace kiln::compiler {

std::unique_ptr<ir::Module> hoistLoopProjections(const ir::Module& m);

}  // namespace kiln::compiler
