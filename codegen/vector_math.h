// Vectorizable float32 approximations of exp, log, tanh, sigmoid and erf, emitted
// as straight-line LLVM IR (no calls, no branches), so the loop vectorizer widens
// them to AVX-512 like any arithmetic. libm calls would stay scalar.
//
// Each function handles 0, ±inf, NaN and the full float range (including
// denormal results); the maximum errors below are checked against double-precision
// libm over wide ranges in tests/unit/vector_math_test.cc. A multiply and the add
// that follows it may fuse into one FMA (one rounding instead of two).
#pragma once

namespace llvm {
class Value;
class IRBuilderBase;
}  // namespace llvm

namespace kiln::jit {

// Maximum relative error against the exact result, for results that are normal
// floats (measured maxima on a dense sweep plus every binade, in parentheses).
inline constexpr double kExpMaxRelError = 1.5e-7;      // (8.2e-8)
inline constexpr double kLogMaxRelError = 1e-7;        // (5.5e-8); near x = 1 the absolute error is below 1e-7
inline constexpr double kTanhMaxRelError = 2e-7;       // (1.05e-7)
inline constexpr double kSigmoidMaxRelError = 3e-7;    // (1.7e-7)
inline constexpr double kErfMaxAbsError = 3e-7;        // (1.75e-7); also the relative bound for |x| < 1

llvm::Value* emitExpF32(llvm::IRBuilderBase& b, llvm::Value* x);
// exp(x) for x <= 0 or NaN (softmax's x - max): emitExpF32's bits, in fewer
// instructions; an argument above 0 gives an unspecified result.
llvm::Value* emitExpNonPositiveF32(llvm::IRBuilderBase& b, llvm::Value* x);
llvm::Value* emitLogF32(llvm::IRBuilderBase& b, llvm::Value* x);
llvm::Value* emitTanhF32(llvm::IRBuilderBase& b, llvm::Value* x);
llvm::Value* emitSigmoidF32(llvm::IRBuilderBase& b, llvm::Value* x);
llvm::Value* emitErfF32(llvm::IRBuilderBase& b, llvm::Value* x);

}  // namespace kiln::jit
