// Cephes-style float32 polynomial approximations, written as LLVM IR.
#include "codegen/vector_math.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <cfloat>
#include <cmath>
#include <initializer_list>

namespace kiln::jit {

namespace {

llvm::Value* c(llvm::IRBuilderBase& b, double v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }
llvm::Value* ci(llvm::IRBuilderBase& b, int v) { return b.getInt32(static_cast<uint32_t>(v)); }

// Horner evaluation: coeffs from the highest degree down.
llvm::Value* horner(llvm::IRBuilderBase& b, llvm::Value* x, std::initializer_list<double> coeffs) {
  llvm::Value* acc = nullptr;
  for (double k : coeffs) acc = acc ? b.CreateFAdd(b.CreateFMul(acc, x), c(b, k)) : c(b, k);
  return acc;
}

llvm::Value* unaryIntrinsic(llvm::IRBuilderBase& b, llvm::Intrinsic::ID id, llvm::Value* x) {
  return b.CreateUnaryIntrinsic(id, x);
}

llvm::Value* isNaN(llvm::IRBuilderBase& b, llvm::Value* x) { return b.CreateFCmpUNO(x, x); }

// 2^e as a float, for an int32 e in [-126, 128] (128 gives +inf's bits).
llvm::Value* pow2(llvm::IRBuilderBase& b, llvm::Value* e) {
  return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, ci(b, 127)), 23), b.getFloatTy());
}

// x * 2^n for an integer-valued float n in [-150, 128], applied as two factors that
// are each normal floats, one after the other: neither the factors nor the
// intermediate overflow, and results in the denormal range round once.
llvm::Value* scaleByPow2(llvm::IRBuilderBase& b, llvm::Value* x, llvm::Value* n) {
  llvm::Value* ni = b.CreateFPToSI(n, b.getInt32Ty());
  llvm::Value* n1 = b.CreateAShr(ni, 1);
  llvm::Value* n2 = b.CreateSub(ni, n1);
  return b.CreateFMul(b.CreateFMul(x, pow2(b, n2)), pow2(b, n1));
}

// Lets a multiply and the add after it fuse into one FMA within an
// approximation: fewer instructions, and each fused step rounds once instead of
// twice, so the stated error bounds still hold.
class ContractGuard {
 public:
  explicit ContractGuard(llvm::IRBuilderBase& b) : guard_(b) {
    llvm::FastMathFlags f = b.getFastMathFlags();
    f.setAllowContract();
    b.setFastMathFlags(f);
  }

 private:
  llvm::IRBuilderBase::FastMathFlagGuard guard_;
};

// exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln(2) / 2, for x already
// clamped to [-104, 89]: exp(r) and n (an integer-valued float in [-150, 128]).
struct ReducedExp {
  llvm::Value* mantissa;
  llvm::Value* n;
};
ReducedExp reducedExp(llvm::IRBuilderBase& b, llvm::Value* clamped) {
  llvm::Value* n = unaryIntrinsic(b, llvm::Intrinsic::rint, b.CreateFMul(clamped, c(b, 1.44269504088896341)));
  llvm::Value* r = b.CreateFSub(clamped, b.CreateFMul(n, c(b, 0.693359375)));
  r = b.CreateFSub(r, b.CreateFMul(n, c(b, -2.12194440e-4)));
  llvm::Value* z = b.CreateFMul(r, r);
  llvm::Value* p = horner(b, r, {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2,
                                 1.6666665459E-1, 5.0000001201E-1});
  return {b.CreateFAdd(b.CreateFAdd(b.CreateFMul(p, z), r), c(b, 1.0)), n};
}

// exp(y) for y >= 0 (or NaN, giving a finite value the caller replaces): as
// emitExpF32, but n is in [0, 128], so 2^n is one factor, and 2^128's bit
// pattern is +inf, which is exp's overflow. The same bits as emitExpF32, with
// a third fewer instructions and a shorter chain (tanh's exp path).
llvm::Value* expOfNonNegative(llvm::IRBuilderBase& b, llvm::Value* y) {
  ReducedExp e = reducedExp(b, b.CreateMinNum(y, c(b, 89.0)));
  return b.CreateFMul(e.mantissa, pow2(b, b.CreateFPToSI(e.n, b.getInt32Ty())));
}

// exp(y) for y <= 0 (or NaN, giving a finite value the caller replaces): as
// emitExpF32, but n is in [-150, 0], so p * 2^(n + 24) is an exact normal
// float and the constant 2^-24 after it rounds once into the denormals (the
// split scale's result, in two instructions fewer); below -103.97 that rounds
// to 0, as emitExpF32's does. The same bits as emitExpF32 (sigmoid's exp).
llvm::Value* expOfNonPositive(llvm::IRBuilderBase& b, llvm::Value* y) {
  ReducedExp e = reducedExp(b, b.CreateMaxNum(y, c(b, -104.0)));
  llvm::Value* scaled = b.CreateFMul(e.mantissa, pow2(b, b.CreateAdd(b.CreateFPToSI(e.n, b.getInt32Ty()), ci(b, 24))));
  return b.CreateFMul(scaled, c(b, 0x1p-24));
}

}  // namespace

llvm::Value* emitExpF32(llvm::IRBuilderBase& b, llvm::Value* x) {
  ContractGuard contract(b);
  ReducedExp e = reducedExp(b, b.CreateMinNum(b.CreateMaxNum(x, c(b, -104.0)), c(b, 89.0)));
  // The clamp makes the edges: above ln(FLT_MAX) n is 128 and exp(r) >= 1 (r >= 0
  // and the polynomial's terms are then all non-negative), so the scale
  // overflows to +inf; below -103.97 (exp under half the least denormal) n is
  // -150 and exp(r) < 1, so it rounds to 0. Only NaN, which the clamp drops,
  // is put back (the same bits as explicit edge tests, all 2^32 inputs compared).
  llvm::Value* result = scaleByPow2(b, e.mantissa, e.n);
  return b.CreateSelect(isNaN(b, x), x, result);
}

llvm::Value* emitExpNonPositiveF32(llvm::IRBuilderBase& b, llvm::Value* x) {
  ContractGuard contract(b);
  return b.CreateSelect(isNaN(b, x), x, expOfNonPositive(b, x));
}

llvm::Value* emitLogF32(llvm::IRBuilderBase& b, llvm::Value* x) {
  ContractGuard contract(b);
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log(x) = e ln 2 + log(m).
  llvm::Value* denormal = b.CreateFCmpOLT(x, c(b, FLT_MIN));
  llvm::Value* xs = b.CreateSelect(denormal, b.CreateFMul(x, c(b, 8388608.0)), x);  // 2^23
  llvm::Value* bits = b.CreateBitCast(xs, b.getInt32Ty());
  llvm::Value* e = b.CreateSub(b.CreateAnd(b.CreateLShr(bits, 23), ci(b, 0xff)), ci(b, 126));
  e = b.CreateSub(e, b.CreateSelect(denormal, ci(b, 23), ci(b, 0)));
  llvm::Value* m = b.CreateBitCast(b.CreateOr(b.CreateAnd(bits, ci(b, 0x007fffff)), ci(b, 0x3f000000)), b.getFloatTy());
  llvm::Value* small = b.CreateFCmpOLT(m, c(b, 0.707106781186547524));
  e = b.CreateSub(e, b.CreateZExt(small, b.getInt32Ty()));
  m = b.CreateFSub(b.CreateSelect(small, b.CreateFAdd(m, m), m), c(b, 1.0));
  llvm::Value* ef = b.CreateSIToFP(e, b.getFloatTy());
  llvm::Value* z = b.CreateFMul(m, m);
  llvm::Value* y = horner(b, m, {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1,
                                 1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1,
                                 3.3333331174E-1});
  y = b.CreateFMul(b.CreateFMul(y, m), z);
  y = b.CreateFAdd(y, b.CreateFMul(ef, c(b, -2.12194440e-4)));
  y = b.CreateFSub(y, b.CreateFMul(z, c(b, 0.5)));
  llvm::Value* result = b.CreateFAdd(b.CreateFAdd(m, y), b.CreateFMul(ef, c(b, 0.693359375)));
  result = b.CreateSelect(b.CreateFCmpOEQ(x, c(b, INFINITY)), x, result);
  result = b.CreateSelect(b.CreateFCmpOEQ(x, c(b, 0.0)), c(b, -INFINITY), result);
  result = b.CreateSelect(b.CreateFCmpOLT(x, c(b, 0.0)), c(b, NAN), result);
  return b.CreateSelect(isNaN(b, x), x, result);
}

llvm::Value* emitTanhF32(llvm::IRBuilderBase& b, llvm::Value* x) {
  ContractGuard contract(b);
  llvm::Value* a = unaryIntrinsic(b, llvm::Intrinsic::fabs, x);
  llvm::Value* z = b.CreateFMul(x, x);
  llvm::Value* p = horner(b, z, {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2, 1.33314422036E-1,
                                 -3.33332819422E-1});
  llvm::Value* small = b.CreateFAdd(b.CreateFMul(b.CreateFMul(p, z), x), x);
  small = b.CreateSelect(b.CreateFCmpOEQ(x, c(b, 0.0)), x, small);  // keeps the sign of -0
  // 1 - 2 / (exp(2|x|) + 1), with the sign of x; exact 1 once exp overflows.
  llvm::Value* e = expOfNonNegative(b, b.CreateFAdd(a, a));
  llvm::Value* t = b.CreateFSub(c(b, 1.0), b.CreateFDiv(c(b, 2.0), b.CreateFAdd(e, c(b, 1.0))));
  llvm::Value* large = b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, t, x);
  // NaN takes the polynomial, which keeps it (the exp path would not).
  return b.CreateSelect(b.CreateFCmpULT(a, c(b, 0.625)), small, large);
}

llvm::Value* emitSigmoidF32(llvm::IRBuilderBase& b, llvm::Value* x) {
  // With e = exp(-|x|) <= 1: 1 / (1 + e) for x >= 0, e / (1 + e) below, so tiny
  // results (down to denormals) keep their precision instead of flushing to 0.
  ContractGuard contract(b);
  llvm::Value* e = expOfNonPositive(b, b.CreateFNeg(unaryIntrinsic(b, llvm::Intrinsic::fabs, x)));
  llvm::Value* r = b.CreateFDiv(c(b, 1.0), b.CreateFAdd(c(b, 1.0), e));  // one division
  r = b.CreateSelect(b.CreateFCmpOGE(x, c(b, 0.0)), r, b.CreateFMul(e, r));
  return b.CreateSelect(isNaN(b, x), x, r);
}

llvm::Value* emitErfF32(llvm::IRBuilderBase& b, llvm::Value* x) {
  ContractGuard contract(b);
  llvm::Value* a = unaryIntrinsic(b, llvm::Intrinsic::fabs, x);
  // |x| < 1: x * P(x^2) (Cephes erff).
  llvm::Value* z = b.CreateFMul(x, x);
  llvm::Value* small = b.CreateFMul(
      x, horner(b, z, {7.853861353153693E-5, -8.010193625184903E-4, 5.188327685732524E-3, -2.685381193529856E-2,
                       1.128358514861418E-1, -3.761262582423300E-1, 1.128379165726710E+0}));
  // |x| >= 1: Abramowitz & Stegun 7.1.26.
  llvm::Value* t = b.CreateFDiv(c(b, 1.0), b.CreateFAdd(c(b, 1.0), b.CreateFMul(a, c(b, 0.3275911))));
  llvm::Value* poly = b.CreateFMul(
      t, horner(b, t, {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592}));
  llvm::Value* tail = b.CreateFSub(c(b, 1.0), b.CreateFMul(poly, expOfNonPositive(b, b.CreateFNeg(z))));
  llvm::Value* large = b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, tail, x);
  llvm::Value* r = b.CreateSelect(b.CreateFCmpOLT(a, c(b, 1.0)), small, large);
  return b.CreateSelect(isNaN(b, x), x, r);
}

}  // namespace kiln::jit
