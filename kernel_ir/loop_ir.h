// The loop-level kernel representation: loops, buffers, index arithmetic and
// scalar computations, produced by lowering a FusedFunction and consumed by the
// code generators (CPU now, CUDA later), so no operator is lowered twice.
//
// Representation: a LoopKernel owns flat arrays of expression and statement nodes
// addressed by integer ids. Expressions are pure and hash-consed by the builder
// (an identical expression gets the same id), so common subexpressions of inlined
// operators are shared. Index arithmetic is int64; float16 data is loaded as
// float32 and stored back rounded; bool values are i1 in expressions and one byte
// in memory. Dimensions are compile-time constants where the type is static and
// `Dim` reads of the run-time shape array where it is `?`.
//
// Reductions are expressions (`Reduce`): a combiner over one or more reduction
// loops whose body may use their loop variables, so element-wise producers fuse
// into a reduction's input and consumers into its result.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/dtype.h"
#include "kernel_ir/schedule.h"

namespace kiln::loop {

using ExprId = int32_t;
using StmtId = int32_t;

// ExpNonPositive: exp of an argument that is never above 0 (or is NaN), as
// softmax's x - max(x): a backend may leave out exp's overflow handling.
enum class UnaryOp : uint8_t { Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Erf, Sin, Cos, Abs, Floor, Ceil, Round, Not, ExpNonPositive };
enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Max, Min, FloorDiv, Mod, FloorMod,
  Eq, Ne, Lt, Le, Gt, Ge, And, Or,
};
// ArgMax/ArgMin give the (Int64) position of the first extreme element, counted
// row-major over the reduction variables.
enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, All, Any, ArgMax, ArgMin };

enum class ExprKind : uint8_t {
  IntConst,    // ival, of `type` (Int64 for indices)
  FloatConst,  // fval, of `type`
  Dim,         // run-time dimension: shapes[ival]; Int64
  Var,         // loop variable `a`; Int64
  Load,        // buffer `a` at linear index `b`; element type `type`
  Unary,       // op(a)
  Binary,      // op(a, b); comparisons give Bool
  Select,      // a ? b : c
  Cast,        // a converted to `type`
  Reduce,      // combine `op` of body `a` over loop vars reduceVars[c .. c+ival) with extents reduceExtents
};

struct ExprNode {
  ExprKind kind;
  DType type;
  uint8_t op = 0;
  int32_t a = -1, b = -1, c = -1;
  int64_t ival = 0;
  double fval = 0;
};

// Parallel loops run their iterations on the thread pool (outermost loops only);
// vectorized ones are innermost and ask for SIMD; a 1-D nest's loop is both.
enum class LoopKind : uint8_t { Serial, Parallel, Vectorized, ParallelVectorized };
inline bool isParallel(LoopKind k) { return k == LoopKind::Parallel || k == LoopKind::ParallelVectorized; }
inline bool isVectorized(LoopKind k) { return k == LoopKind::Vectorized || k == LoopKind::ParallelVectorized; }
// Gemm: C[m x n] (+)= A * B through the runtime's float32 microkernel (jit/gemm.h).
// Conv2d: a whole NCHW/OIHW float32 convolution through the runtime's direct
// convolution (jit/conv2d.h); CPU kernels only.
enum class StmtKind : uint8_t { For, Store, Block, If, Gemm, Conv2d };

// How a constant weight is prepared for the kernel that reads it: a GEMM's B
// operand (jit::packGemmB) or a convolution's filters (jit::packConvFilter).
// Constant: no packing; marks an input as an executable constant (its own data),
// for a library kernel that keeps work derived from it (jit/library_kernel.h).
enum class PreparedLayout : uint8_t { GemmB, ConvFilter, Constant };
// ConvFilter's param: the groups in bits 0-31, and from this bit on the
// minimal-filtering form (winogradForm below) of a convolution that may take it
// (3x3 filters of one group, equal strides, no dilation), whose prepared form
// then holds that transform as well (jit::packConvFilterWithWinograd); 0 for none.
constexpr int kConvFilterWinogradShift = 32;
// That stride for a convolution's window attributes (its filters must also be
// 3x3, which the packing checks), or 0 where minimal filtering never applies.
// jit::detail::winogradApplies adds the run-time conditions.
constexpr int64_t winogradStride(int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t groups) {
  return groups == 1 && sh == sw && (sh == 1 || sh == 2) && dh == 1 && dw == 1 ? sh : 0;
}
// The forms of minimal filtering (jit/conv2d_winograd.cc), as prepared filters,
// their headers and the kernels name them: 1 stride 1 with 2x2 output tiles
// (F(2x2, 3x3)), 2 stride 2 with 2x2 tiles, 3 stride 1 with 4x4 tiles
// (F(4x4, 3x3), a schedule's winograd=4). The 2x2 forms are the code of their stride.
constexpr int64_t kWinogradF4 = 3;
constexpr bool isWinogradForm(int64_t form) { return form >= 1 && form <= 3; }
constexpr int64_t winogradFormStride(int64_t form) { return form == kWinogradF4 ? 1 : form; }
constexpr int64_t winogradFormTile(int64_t form) { return form == kWinogradF4 ? 4 : 2; }
// The form a convolution of this stride takes when output tiles `tile` on a
// side are asked for (Schedule::convWinograd): 4x4 tiles at stride 1 only,
// 2x2 otherwise; 0 for a stride that has none.
constexpr int64_t winogradForm(int64_t stride, int64_t tile) {
  return stride == 1 && tile == 4 ? kWinogradF4 : stride == 1 || stride == 2 ? stride : 0;
}
// Of the runtime's conditions for minimal filtering, those the channel counts
// decide (its transforms cost per input channel, its products per channel pair:
// jit/conv2d_winograd.cc measured where it pays), and the products a form
// takes per output tile and channel pair: 4 x 4 (stride 1), 5 x 5 (stride 2)
// and 6 x 6 (4x4 tiles), where the direct form takes 9 an output.
constexpr bool winogradChannelsPay(int64_t channels, int64_t filters) { return channels >= 16 && filters >= 8; }
constexpr int64_t winogradTileProducts(int64_t form) { return form == 2 ? 25 : form == kWinogradF4 ? 36 : 16; }

struct GemmArgs {
  int32_t a = -1, b = -1, c = -1;       // buffers
  ExprId m = -1, n = -1, k = -1, lda = -1, ldb = -1, ldc = -1;  // Int64
  ExprId aOffset = -1, bOffset = -1, cOffset = -1;
  bool transA = false, transB = false, accumulate = false;
  // A buffer that may hold B prepacked (BufferDecl::preparedFrom), or -1. Its
  // pointer is null when the runtime has no packed form; the GEMM then reads B.
  int32_t packedB = -1;
  // Post-ops applied to each element of C as it is finished (jit::GemmPost):
  // plus bias buffer `bias` (one float32 per column) when >= 0, then ReLU.
  int32_t bias = -1;
  bool relu = false;
};

struct Conv2dArgs {
  int32_t x = -1, w = -1, out = -1;  // buffers: data, filters, output
  int32_t packedW = -1;  // a buffer that may hold the filters prepacked (PreparedLayout::ConvFilter), or -1
  // n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups (jit::Conv2dDims), Int64
  std::array<ExprId, 16> dims = {};
  // Post-ops applied to each output element as it is finished (jit::ConvPostOps):
  // plus bias buffer `bias` (one float32 per output channel) when >= 0, then ReLU.
  int32_t bias = -1;
  bool relu = false;
  // A chained pair (jit::sconv2dPair) when next.w >= 0: this convolution, its
  // post-ops applied, is the data of `next`, whose output (its own post-ops
  // applied) is `out`. `between` is a scratch buffer of the first output's
  // shape, used where the runtime runs the pair as two calls.
  struct Next {
    int32_t w = -1, packedW = -1, bias = -1, between = -1;
    bool relu = false;
    std::array<ExprId, 16> dims = {};
  } next;
};

struct StmtNode {
  StmtKind kind;
  LoopKind loop = LoopKind::Serial;
  int32_t var = -1;       // For: the loop variable
  ExprId extent = -1;     // For: iterations (0 .. extent)
  int32_t buffer = -1;    // Store
  ExprId index = -1;      // Store: linear element index
  ExprId value = -1;      // Store; If: the condition
  std::vector<StmtId> body = {};  // For, Block; If: the `then` statements
  std::vector<StmtId> orElse = {};  // If: the `else` statements
  GemmArgs gemm = {};               // Gemm
  Conv2dArgs conv = {};             // Conv2d
  // For, a schedule hint: while the loop runs, bring buffer `prefetchBuffer` at
  // prefetchOffset + var into cache a step ahead of use (the next row of a
  // row-wise pass, say). It never changes results; a backend may ignore it.
  int32_t prefetchBuffer = -1;
  ExprId prefetchOffset = -1;
};

struct BufferDecl {
  DType dtype;   // element type in memory
  bool output;   // written by the kernel
  std::string name;
  // A scratch buffer holds one value of the fused function (its id) inside the
  // kernel; the runtime allocates it with that value's run-time shape.
  int32_t scratchValue = -1;
  // Or a work area of a computed size: the product of these factors, each a
  // constant (>= 0) or a run-time shape slot s encoded as -(s + 1).
  std::vector<int64_t> scratchSize = {};
  // Or the prepared (prepacked) form of input buffer `preparedFrom`, supplied
  // by the caller when that input is a constant weight it has packed once
  // (runtime/kernel_table.h); a null pointer otherwise. Never allocated.
  int32_t preparedFrom = -1;
  PreparedLayout preparedLayout = PreparedLayout::GemmB;
  // GemmB: bit 0 set when B is stored n x k, bits 1-2 the tile; ConvFilter:
  // groups (bits 0-31), and the Winograd form (kConvFilterWinogradShift).
  int64_t preparedParam = 0;
  bool isScratch() const { return scratchValue >= 0 || !scratchSize.empty(); }
  bool isPrepared() const { return preparedFrom >= 0; }
};

struct LoopKernel {
  std::string name;
  std::vector<BufferDecl> buffers;  // argument order of the compiled kernel
  int32_t numShapeSlots = 0;        // length of the run-time shape array
  std::vector<ExprNode> exprs;
  std::vector<StmtNode> stmts;
  std::vector<int32_t> reduceVars;  // var ids of Reduce nodes, ranges given by (c, ival)
  std::vector<ExprId> reduceExtents;
  int32_t numVars = 0;
  StmtId body = -1;
  // How the code generator compiles it (kernel_ir/schedule.h); its loop-nest
  // part has already been applied to the statements above.
  Schedule schedule;

  const ExprNode& expr(ExprId id) const { return exprs[static_cast<size_t>(id)]; }
  const StmtNode& stmt(StmtId id) const { return stmts[static_cast<size_t>(id)]; }
  std::string toString() const;
};

// Integer index arithmetic evaluated on the host (a GPU launch's extent, a
// branch on shapes): constants, run-time dimensions from `shapes`, the loop
// variables given in `vars` (by id; others unknown), and integer operators.
// Anything else (loads, floats, reductions) is unknown: nullopt.
std::optional<int64_t> evalOnHost(const LoopKernel& k, ExprId e, const int64_t* shapes,
                                  const std::unordered_map<int32_t, int64_t>& vars);
// Whether `e` can be evaluated on the host once the variables in `vars` are known.
bool hostEvaluable(const LoopKernel& k, ExprId e, const std::vector<int32_t>& vars);

const char* unaryName(UnaryOp op);
const char* binaryName(BinaryOp op);
const char* reduceName(ReduceOp op);
bool isComparison(BinaryOp op);

// Builds a LoopKernel; hash-conses expressions and folds trivial index arithmetic
// and constant conditions (a select on a constant, `and`/`or` with a constant).
class LoopBuilder {
 public:
  explicit LoopBuilder(LoopKernel& k) : k_(k) {}
  LoopKernel& kernel() { return k_; }
  const ExprNode& node(ExprId id) const { return k_.expr(id); }
  DType typeOf(ExprId id) const { return k_.expr(id).type; }

  ExprId intConst(int64_t v, DType type = DType::Int64);
  ExprId floatConst(double v, DType type = DType::Float32);
  // A constant of any value type (bool, int or float).
  ExprId constant(double v, DType type);
  ExprId dim(int32_t slot);
  int32_t newVar() { return k_.numVars++; }
  ExprId var(int32_t id);
  ExprId load(int32_t buffer, ExprId index);
  ExprId unary(UnaryOp op, ExprId a);
  ExprId binary(BinaryOp op, ExprId a, ExprId b);
  ExprId select(ExprId cond, ExprId a, ExprId b);
  ExprId cast(DType type, ExprId a);
  // `vars` must be fresh variables the body uses; `extents` their ranges.
  ExprId reduce(ReduceOp op, const std::vector<int32_t>& vars, const std::vector<ExprId>& extents, ExprId body);

  // Index helpers (Int64), with constant folding.
  ExprId add(ExprId a, ExprId b);
  ExprId mul(ExprId a, ExprId b);

  StmtId forLoop(int32_t var, ExprId extent, LoopKind kind, std::vector<StmtId> body);
  // Marks For `loop` to prefetch buffer[offset + its variable] as it runs.
  void prefetchAlong(StmtId loop, int32_t buffer, ExprId offset);
  StmtId store(int32_t buffer, ExprId index, ExprId value);
  StmtId block(std::vector<StmtId> body);
  StmtId ifThenElse(ExprId cond, std::vector<StmtId> thenBody, std::vector<StmtId> elseBody);
  StmtId gemm(const GemmArgs& args);
  StmtId conv2d(const Conv2dArgs& args);

  bool isIntConst(ExprId e, int64_t* value = nullptr) const;
  // Expression `id` with its operands (a, b, c as ExprNode holds them; a Load's
  // index is b) replaced, rebuilt through the folds above; `id` itself when none
  // changed. A Reduce keeps its own variables: a copy with the new body.
  ExprId withOperands(ExprId id, ExprId a, ExprId b, ExprId c);

 private:
  ExprId intern(const ExprNode& n);

  struct KeyHash {
    size_t operator()(const ExprNode& n) const;
  };
  struct KeyEq {
    bool operator()(const ExprNode& a, const ExprNode& b) const;
  };
  LoopKernel& k_;
  std::unordered_map<ExprNode, ExprId, KeyHash, KeyEq> interned_;
};

}  // namespace kiln::loop
