// Folds shape arithmetic that the types already answer: `take(shape_of(%x), i)`
// with a literal index names one dimension of %x, and when the checked type of %x
// has that dimension static it is a literal (`let %n = take(shape_of(%xs), 0)`
// over a Tensor[(32, 1, 128)] is `let %n = 32`).
//
// What this saves: the shape_of kernel and the take kernel, which would otherwise
// be compiled (or loaded) and called, for a number known at compile time; ONNX
// Runtime's constant folding and TVM's shape simplification fold the same
// Shape -> Gather chains. A `?` dimension, an index that is not a literal, or a
// shape_of used otherwise is left alone, as are primitive functions (kernels as
// written). Index modes follow `take`'s lowering: `wrap` wraps, `clip` and `fast`
// clamp into [0, rank - 1].
#pragma once

#include <memory>

#include "compiler/ir/module.h"

namespace kiln::compiler {

std::unique_ptr<ir::Module> foldStaticShapes(const ir::Module& m);

}  // namespace kiln::compiler
