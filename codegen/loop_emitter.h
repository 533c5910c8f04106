// The target-independent half of code generation: a LoopKernel's statements and
// expressions to LLVM IR (types, loops, reductions hoisted to the scope they
// depend on, the math approximations of vector_math.h, never-trapping integer
// division, saturating casts). Backends derive from LoopEmitter and supply what
// differs: the functions the body lives in, outermost parallel loops (a thread
// pool on the CPU, a grid on the GPU), Gemm statements, and math calls.
//
// State while emitting: `fn_` is the function being filled, whose arguments are
// the kernel's buffers in order, then the run-time shape array. Values of
// expressions are cached per loop scope (`scopes_`), so a value computed inside
// a loop is never used after it; `preheaders_` holds the block entering each open
// loop, where hoisted reductions go. Not thread-safe; one per compile.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "kernel_ir/loop_ir.h"
#include "codegen/vector_math.h"
#include "kiln/error.h"

namespace kiln::jit {

class LoopEmitter {
 public:
  LoopEmitter(const loop::LoopKernel& k, llvm::LLVMContext& ctx) : k_(k), ctx_(ctx), b_(ctx) {}
  virtual ~LoopEmitter() = default;
  LoopEmitter(const LoopEmitter&) = delete;
  LoopEmitter& operator=(const LoopEmitter&) = delete;

 protected:
  using BinaryOp = loop::BinaryOp;
  using ExprId = loop::ExprId;
  using ExprKind = loop::ExprKind;
  using ExprNode = loop::ExprNode;
  using StmtKind = loop::StmtKind;
  using UnaryOp = loop::UnaryOp;

  // Whether loops carry vectorization hints (the GPU has no SIMD lanes to ask for).
  virtual bool loopHints() const { return true; }
  // Whether a parallel loop met now runs in parallel: by default only outermost
  // ones (not inside any other loop); elsewhere it runs as a serial loop.
  virtual bool parallelHere() const { return preheaders_.empty(); }
  virtual void emitParallel(const loop::StmtNode& s) = 0;
  virtual void emitGemm(const loop::StmtNode& s) = 0;
  // A product and the statement after it emitted together (the CPU runs a loop
  // that reads the product by column groups inside the product's threads:
  // kernel_ir/gemm_epilogue.h); false, having emitted nothing, where the two
  // are emitted one after the other.
  virtual bool emitGemmThen(const loop::StmtNode&, const loop::StmtNode&) { return false; }
  virtual void emitConv2d(const loop::StmtNode& s) = 0;

  // Starts emitting into `fn` (fresh caches and scopes).
  void beginFunction(llvm::Function* fn) {
    fn_ = fn;
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn);
    b_.SetInsertPoint(entry_);
    cache_.assign(k_.exprs.size(), nullptr);
    vars_.assign(static_cast<size_t>(k_.numVars), nullptr);
    varDepth_.assign(static_cast<size_t>(k_.numVars), -1);
    scopes_.assign(1, {});
    preheaders_.clear();
  }

  // ---- types ----
  llvm::Type* valueType(DType t) {
    switch (t) {
      case DType::Float16:
      case DType::Float32: return b_.getFloatTy();
      case DType::Float64: return b_.getDoubleTy();
      case DType::Int8:
      case DType::UInt8: return b_.getInt8Ty();
      case DType::Int16:
      case DType::UInt16: return b_.getInt16Ty();
      case DType::Int32: return b_.getInt32Ty();
      case DType::Int64: return b_.getInt64Ty();
      case DType::Bool: return b_.getInt1Ty();
    }
    return nullptr;
  }
  llvm::Type* memoryType(DType t) {
    if (t == DType::Float16) return b_.getHalfTy();
    if (t == DType::Bool) return b_.getInt8Ty();
    return valueType(t);
  }
  static bool isUnsigned(DType t) { return isUnsignedInt(t) || t == DType::Bool; }

  // ---- statements ----
  // Vectorize: ask for vectorization, one vector per iteration; VectorizeReduction:
  // also let LLVM interleave (several accumulators hide the add latency that a
  // single one would serialize on); NoVectorize: forbid it (loops whose
  // vectorization would only cost compile time); Auto: leave it to LLVM.
  enum class LoopHint { Vectorize, VectorizeReduction, NoVectorize, Auto };

  void emitStmt(loop::StmtId id) {
    const loop::StmtNode& s = k_.stmt(id);
    switch (s.kind) {
      case StmtKind::Block:
        for (size_t i = 0; i < s.body.size(); ++i) {
          const loop::StmtNode& c = k_.stmt(s.body[i]);
          if (c.kind == StmtKind::Gemm && i + 1 < s.body.size() && emitGemmThen(c, k_.stmt(s.body[i + 1]))) {
            ++i;
            continue;
          }
          emitStmt(s.body[i]);
        }
        return;
      case StmtKind::Store: emitStore(s); return;
      case StmtKind::Gemm: emitGemm(s); return;
      case StmtKind::Conv2d: emitConv2d(s); return;
      case StmtKind::If: {
        llvm::Value* cond = emitExpr(s.value);
        auto* thenBB = llvm::BasicBlock::Create(ctx_, "then", fn_);
        auto* elseBB = llvm::BasicBlock::Create(ctx_, "else", fn_);
        auto* join = llvm::BasicBlock::Create(ctx_, "join", fn_);
        b_.CreateCondBr(cond, thenBB, elseBB);
        for (auto [bb, stmts] : {std::pair{thenBB, &s.body}, std::pair{elseBB, &s.orElse}}) {
          b_.SetInsertPoint(bb);
          scopes_.emplace_back();
          for (loop::StmtId c : *stmts) emitStmt(c);
          for (ExprId e : scopes_.back()) cache_[static_cast<size_t>(e)] = nullptr;
          scopes_.pop_back();
          b_.CreateBr(join);
        }
        b_.SetInsertPoint(join);
        return;
      }
      case StmtKind::For: {
        if (loop::isParallel(s.loop) && parallelHere()) {
          emitParallel(s);
          return;
        }
        emitInnerFor(s, loop::isVectorized(s.loop) ? LoopHint::Vectorize : LoopHint::NoVectorize);
        return;
      }
    }
  }

  // Hooks for how a backend maps statements onto its threads (the GPU shares a
  // block's work out); the defaults run them in the calling thread.
  virtual void emitStore(const loop::StmtNode& s) { storeValue(s); }
  virtual void emitInnerFor(const loop::StmtNode& s, LoopHint hint) {
    emitLoop(s.var, emitExpr(s.extent), hint, [&] {
      for (loop::StmtId c : s.body) emitStmt(c);
    });
  }
  llvm::StoreInst* storeValue(const loop::StmtNode& s) {
    const loop::BufferDecl& buf = k_.buffers[static_cast<size_t>(s.buffer)];
    llvm::Value* v = emitExpr(s.value);
    if (buf.dtype == DType::Float16) v = b_.CreateFPTrunc(v, b_.getHalfTy());
    if (buf.dtype == DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
    llvm::Value* p = b_.CreateInBoundsGEP(memoryType(buf.dtype), fn_->getArg(static_cast<unsigned>(s.buffer)), emitExpr(s.index));
    return b_.CreateStore(v, p);
  }

  // A reduction whose outermost loop is shared among threads: each takes the
  // iterations from splitBegin() by splitStep(), and combineSplit() merges the
  // partial results (every thread gets the total). Arg reductions never split.
  virtual bool splitReduction(const ExprNode&) { return false; }
  virtual llvm::Value* splitBegin() { return nullptr; }
  virtual llvm::Value* splitStep() { return nullptr; }
  virtual llvm::Value* combineSplit(loop::ReduceOp, DType, llvm::Value* partial) { return partial; }

  // for (var = begin; var < extent; var += step) body() (begin 0 and step 1 unless
  // given); caches of values computed inside are dropped after.

  // Reduction loops up to this static trip count are never unrolled (see emitLoop).
  static constexpr int64_t kMaxTripsToKeepRolled = 256;

  template <class Body>
  void emitLoop(int32_t var, llvm::Value* extent, LoopHint hint, Body&& body, llvm::Value* begin = nullptr,
                llvm::Value* step = nullptr) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* bodyBB = llvm::BasicBlock::Create(ctx_, "body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    b_.CreateBr(header);
    preheaders_.push_back(pre);  // code hoisted out of this loop goes before pre's branch
    b_.SetInsertPoint(header);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i" + std::to_string(var));
    i->addIncoming(begin ? begin : b_.getInt64(0), pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, extent), bodyBB, exit);
    b_.SetInsertPoint(bodyBB);
    vars_[static_cast<size_t>(var)] = i;
    varDepth_[static_cast<size_t>(var)] = static_cast<int>(scopes_.size());
    scopes_.emplace_back();
    size_t loopsBefore = ++loopsEmitted_;
    if (!loopHints()) hint = LoopHint::Auto;
    body();
    // A loop with loops inside (a reduction that could not be hoisted) is not an
    // innermost loop: forcing vectorization there would only fail.
    bool hasInnerLoops = loopsEmitted_ != loopsBefore;
    if (hasInnerLoops && (hint == LoopHint::Vectorize || hint == LoopHint::VectorizeReduction)) hint = LoopHint::Auto;
    for (ExprId e : scopes_.back()) cache_[static_cast<size_t>(e)] = nullptr;
    scopes_.pop_back();
    varDepth_[static_cast<size_t>(var)] = -1;
    vars_[static_cast<size_t>(var)] = nullptr;
    preheaders_.pop_back();
    llvm::Value* next = b_.CreateAdd(i, step ? step : b_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
    auto* back = b_.CreateBr(header);
    i->addIncoming(next, b_.GetInsertBlock());
    if (hint == LoopHint::Auto && hasInnerLoops && loopHints()) {
      // Unrolling a loop around loops copies their bodies (math-heavy vector
      // loops, a dozen of them for a runtime unroll by 8) for no gain: it is what
      // made compiling an element-wise kernel slow, LSR and instruction selection
      // working through the copies.
      llvm::MDNode* noUnroll = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")});
      llvm::MDNode* progress = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.mustprogress")});
      auto* loopID = llvm::MDNode::getDistinct(ctx_, {nullptr, progress, noUnroll});
      loopID->replaceOperandWith(0, loopID);
      back->setMetadata(llvm::LLVMContext::MD_loop, loopID);
    } else if (hint == LoopHint::VectorizeReduction) {
      llvm::MDNode* enable = llvm::MDNode::get(
          ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"), llvm::ConstantAsMetadata::get(b_.getTrue())});
      llvm::MDNode* progress = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.mustprogress")});
      llvm::SmallVector<llvm::Metadata*, 4> ops{nullptr, enable, progress};
      // A short static trip count (a 32-wide row of a global mean) was fully
      // unrolled before the vectorizer saw the loop, which then vectorized the
      // loop around it, across rows, with strided gathers (10 GB/s) instead of
      // along the contiguous row. Such loops are not unrolled; long ones keep the
      // unrolling after vectorization that their throughput needs (a 4096-wide
      // row sum lost 20% without it).
      auto* trips = llvm::dyn_cast<llvm::ConstantInt>(extent);
      if (trips && trips->getSExtValue() <= kMaxTripsToKeepRolled)
        ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")}));
      if (k_.schedule.vectorWidth > 0)
        ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.width"),
                                               llvm::ConstantAsMetadata::get(b_.getInt32(k_.schedule.vectorWidth))}));
      if (k_.schedule.interleave > 1)
        ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.interleave.count"),
                                               llvm::ConstantAsMetadata::get(b_.getInt32(k_.schedule.interleave))}));
      auto* loopID = llvm::MDNode::getDistinct(ctx_, ops);
      loopID->replaceOperandWith(0, loopID);
      back->setMetadata(llvm::LLVMContext::MD_loop, loopID);
    } else if (hint != LoopHint::Auto) {
      const loop::Schedule& sched = k_.schedule;
      bool vectorize = hint == LoopHint::Vectorize;
      llvm::MDNode* enable = llvm::MDNode::get(
          ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"),
                 llvm::ConstantAsMetadata::get(vectorize ? b_.getTrue() : b_.getFalse())});
      llvm::MDNode* progress = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.mustprogress")});
      // One vector iteration per loop trip unless the schedule says otherwise:
      // interleaving multiplies code (and compile time) for little gain in loops
      // that are bound by memory or by math.
      llvm::MDNode* interleave = llvm::MDNode::get(
          ctx_, {llvm::MDString::get(ctx_, "llvm.loop.interleave.count"),
                 llvm::ConstantAsMetadata::get(b_.getInt32(vectorize ? sched.interleave : 1))});
      // No unrolling either: a short static trip count would otherwise be unrolled
      // into several copies of the (math-heavy) vector body. A schedule may unroll
      // a serial loop.
      llvm::MDNode* unroll =
          !vectorize && sched.unroll > 1
              ? llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.count"),
                                         llvm::ConstantAsMetadata::get(b_.getInt32(sched.unroll))})
              : llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")});
      llvm::SmallVector<llvm::Metadata*, 6> ops{nullptr, enable, progress, interleave, unroll};
      if (vectorize && sched.vectorWidth > 0)
        ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.width"),
                                               llvm::ConstantAsMetadata::get(b_.getInt32(sched.vectorWidth))}));
      auto* loopID = llvm::MDNode::getDistinct(ctx_, ops);
      loopID->replaceOperandWith(0, loopID);
      back->setMetadata(llvm::LLVMContext::MD_loop, loopID);
    } else if (!hasInnerLoops && loopHints() && k_.schedule.unroll > 0) {
      // An innermost loop left to LLVM (a reduction's): the schedule's unroll count.
      llvm::MDNode* unroll =
          k_.schedule.unroll > 1
              ? llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.count"),
                                         llvm::ConstantAsMetadata::get(b_.getInt32(k_.schedule.unroll))})
              : llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")});
      llvm::MDNode* progress = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.mustprogress")});
      auto* loopID = llvm::MDNode::getDistinct(ctx_, {nullptr, progress, unroll});
      loopID->replaceOperandWith(0, loopID);
      back->setMetadata(llvm::LLVMContext::MD_loop, loopID);
    }
    b_.SetInsertPoint(exit);
  }

  // ---- expressions ----
  llvm::Value* emitExpr(ExprId id) {
    llvm::Value*& slot = cache_[static_cast<size_t>(id)];
    if (slot) return slot;
    const ExprNode& n = k_.expr(id);
    if (n.kind == ExprKind::Reduce) return emitHoisted(id);
    llvm::Value* v = emitNode(n);
    cache_[static_cast<size_t>(id)] = v;
    scopes_.back().push_back(id);
    return v;
  }

  // The deepest loop scope whose variable `id` uses (0: none). Variables bound
  // inside the expression itself (a reduction's own) are not bound yet: -1.
  int dependDepth(ExprId id, std::unordered_map<ExprId, int>& memo) {
    auto it = memo.find(id);
    if (it != memo.end()) return it->second;
    const ExprNode& n = k_.expr(id);
    int d = 0;
    if (n.kind == ExprKind::Var) d = std::max(0, varDepth_[static_cast<size_t>(n.a)]);
    if (n.kind == ExprKind::Reduce) {
      for (int64_t i = 0; i < n.ival; ++i) d = std::max(d, dependDepth(k_.reduceExtents[static_cast<size_t>(n.c + i)], memo));
    }
    if (n.kind != ExprKind::IntConst && n.kind != ExprKind::FloatConst && n.kind != ExprKind::Dim &&
        n.kind != ExprKind::Var) {
      for (ExprId c : {n.kind == ExprKind::Load ? n.b : n.a, n.kind == ExprKind::Load ? -1 : n.b, n.c}) {
        if (c < 0 || (n.kind == ExprKind::Reduce && c != n.a)) continue;
        d = std::max(d, dependDepth(c, memo));
      }
    }
    memo.emplace(id, d);
    return d;
  }

  // A reduction contains loops, which LLVM will not hoist: emit it in the
  // outermost scope where all its free variables are bound, before the loops it
  // does not depend on, so a row's max or sum is computed once per row.
  llvm::Value* emitHoisted(ExprId id) {
    std::unordered_map<ExprId, int> memo;
    int depth = dependDepth(id, memo);
    int here = static_cast<int>(scopes_.size()) - 1;
    if (depth >= here) {
      llvm::Value* v = emitNode(k_.expr(id));
      cache_[static_cast<size_t>(id)] = v;
      scopes_.back().push_back(id);
      return v;
    }
    // Emit at the end of the preheader of the loop just inside scope `depth`: take
    // its branch off, emit (possibly new blocks and loops), branch on again.
    llvm::BasicBlock* pre = preheaders_[static_cast<size_t>(depth)];
    llvm::Instruction* term = pre->getTerminator();
    llvm::BasicBlock* header = term->getSuccessor(0);
    term->eraseFromParent();
    llvm::IRBuilderBase::InsertPointGuard guard(b_);
    b_.SetInsertPoint(pre);
    // Values cached in deeper scopes do not dominate the preheader: hide them.
    std::vector<std::pair<ExprId, llvm::Value*>> hidden;
    for (size_t sc = static_cast<size_t>(depth) + 1; sc < scopes_.size(); ++sc)
      for (ExprId e : scopes_[sc]) {
        hidden.emplace_back(e, cache_[static_cast<size_t>(e)]);
        cache_[static_cast<size_t>(e)] = nullptr;
      }
    std::vector<std::vector<ExprId>> inner(scopes_.begin() + depth + 1, scopes_.end());
    scopes_.resize(static_cast<size_t>(depth) + 1);
    llvm::Value* v = emitNode(k_.expr(id));
    cache_[static_cast<size_t>(id)] = v;
    scopes_.back().push_back(id);
    scopes_.insert(scopes_.end(), inner.begin(), inner.end());
    for (auto& [e, val] : hidden)
      if (!cache_[static_cast<size_t>(e)]) cache_[static_cast<size_t>(e)] = val;
    llvm::BasicBlock* end = b_.GetInsertBlock();
    b_.CreateBr(header);
    if (end != pre) {
      header->replacePhiUsesWith(pre, end);
      preheaders_[static_cast<size_t>(depth)] = end;
    }
    return v;
  }

  llvm::Value* emitNode(const ExprNode& n) {
    switch (n.kind) {
      case ExprKind::IntConst: return llvm::ConstantInt::get(valueType(n.type), static_cast<uint64_t>(n.ival), true);
      case ExprKind::FloatConst: return llvm::ConstantFP::get(valueType(n.type), n.fval);
      case ExprKind::Dim: {
        llvm::Value* shapes = fn_->getArg(static_cast<unsigned>(k_.buffers.size()));
        return b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), shapes, n.ival));
      }
      case ExprKind::Var: return vars_[static_cast<size_t>(n.a)];
      case ExprKind::Load: {
        const loop::BufferDecl& buf = k_.buffers[static_cast<size_t>(n.a)];
        llvm::Value* p = b_.CreateInBoundsGEP(memoryType(buf.dtype), fn_->getArg(static_cast<unsigned>(n.a)), emitExpr(n.b));
        llvm::Value* v = b_.CreateLoad(memoryType(buf.dtype), p);
        if (buf.dtype == DType::Float16) return b_.CreateFPExt(v, b_.getFloatTy());
        if (buf.dtype == DType::Bool) return b_.CreateICmpNE(v, b_.getInt8(0));
        return v;
      }
      case ExprKind::Unary: return emitUnary(static_cast<UnaryOp>(n.op), emitExpr(n.a), k_.expr(n.a).type);
      case ExprKind::Binary: return emitBinary(static_cast<BinaryOp>(n.op), emitExpr(n.a), emitExpr(n.b), k_.expr(n.a).type);
      case ExprKind::Select: return b_.CreateSelect(emitExpr(n.a), emitExpr(n.b), emitExpr(n.c));
      case ExprKind::Cast: return emitCast(emitExpr(n.a), k_.expr(n.a).type, n.type);
      case ExprKind::Reduce: return emitReduce(n);
    }
    throw Error("internal: unknown loop expression");
  }

  // Math the target may provide differently: LLVM intrinsics on the CPU; the GPU
  // lowers the ones NVPTX cannot select (exp, log, sin, cos, pow) to libdevice.
  virtual llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::Value* x) { return b_.CreateUnaryIntrinsic(id, x); }
  virtual llvm::Value* powOf(llvm::Value* x, llvm::Value* y) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y); }
  // A scalar function of the math library (tanh, erf in float64).
  virtual llvm::Value* libmCall(const char* name, llvm::Value* x) = 0;

  llvm::Value* emitUnary(UnaryOp op, llvm::Value* x, DType t) {
    bool f32 = t == DType::Float32, flt = isFloat(t);
    switch (op) {
      case UnaryOp::Neg: return flt ? b_.CreateFNeg(x) : b_.CreateNeg(x);
      case UnaryOp::Exp: return f32 ? emitExpF32(b_, x) : intrinsic(llvm::Intrinsic::exp, x);
      case UnaryOp::ExpNonPositive: return f32 ? emitExpNonPositiveF32(b_, x) : intrinsic(llvm::Intrinsic::exp, x);
      case UnaryOp::Log: return f32 ? emitLogF32(b_, x) : intrinsic(llvm::Intrinsic::log, x);
      case UnaryOp::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, x);
      case UnaryOp::Rsqrt:
        return b_.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0), intrinsic(llvm::Intrinsic::sqrt, x));
      case UnaryOp::Tanh: return f32 ? emitTanhF32(b_, x) : libmCall("tanh", x);
      case UnaryOp::Sigmoid:
        if (f32) return emitSigmoidF32(b_, x);
        return b_.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0),
                             b_.CreateFAdd(llvm::ConstantFP::get(x->getType(), 1.0),
                                           intrinsic(llvm::Intrinsic::exp, b_.CreateFNeg(x))));
      case UnaryOp::Erf: return f32 ? emitErfF32(b_, x) : libmCall("erf", x);
      case UnaryOp::Sin: return intrinsic(llvm::Intrinsic::sin, x);
      case UnaryOp::Cos: return intrinsic(llvm::Intrinsic::cos, x);
      case UnaryOp::Abs:
        return flt ? intrinsic(llvm::Intrinsic::fabs, x) : b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
      case UnaryOp::Floor: return intrinsic(llvm::Intrinsic::floor, x);
      case UnaryOp::Ceil: return intrinsic(llvm::Intrinsic::ceil, x);
      case UnaryOp::Round: return intrinsic(llvm::Intrinsic::rint, x);  // half to even, as numpy
      case UnaryOp::Not: return b_.CreateNot(x);
    }
    throw Error("internal: unknown unary operator");
  }

  // Integer power, exact: x^y by squaring, saturated to the type's range as a
  // double power converted with saturation would be (kernel_ir/scalar_kernel.cc's
  // intPower is the same function for host scalars). A negative exponent truncates
  // 1/x^|y| toward zero: 0 unless x is 1 or -1, and 0^-n saturates high as +inf
  // does. Not a double power: libdevice's pow misses exact integer results by an
  // ulp (pow(3, 1) < 3 on an H200), which the conversion truncates to 2.
  llvm::Value* intPower(llvm::Value* x, llvm::Value* y, bool isSigned) {
    llvm::Type* t = x->getType();
    unsigned width = t->getScalarSizeInBits();
    auto constant = [&](const llvm::APInt& v) { return llvm::ConstantInt::get(t, v); };
    auto small = [&](int64_t v) { return llvm::ConstantInt::get(t, static_cast<uint64_t>(v), isSigned); };
    llvm::Value* zero = small(0);
    llvm::Value* one = small(1);
    llvm::Value* noFlag = b_.CreateICmpNE(zero, zero);  // false, of x's shape (scalar or vector)
    // Seven exponent bits: past 127 every |x| >= 2 overflows already, and 0, 1
    // and -1 only care for the exponent's parity, which 126 or 127 keeps.
    unsigned steps = std::min(width, 7u);
    llvm::Value* e = y;
    if (width > 7) {
      llvm::Value* big = isSigned ? b_.CreateICmpSGT(y, small(127)) : b_.CreateICmpUGT(y, small(127));
      e = b_.CreateSelect(big, b_.CreateOr(small(126), b_.CreateAnd(y, one)), y);
    }
    llvm::Intrinsic::ID mulWithOverflow =
        isSigned ? llvm::Intrinsic::smul_with_overflow : llvm::Intrinsic::umul_with_overflow;
    llvm::Value* result = one;
    llvm::Value* base = x;
    llvm::Value* overflow = noFlag;
    llvm::Value* baseOverflow = noFlag;  // base = x^(2^i) no longer fits
    for (unsigned i = 0; i < steps; ++i) {
      llvm::Value* bit = b_.CreateICmpNE(b_.CreateAnd(e, small(int64_t{1} << i)), zero);
      llvm::Value* product = b_.CreateBinaryIntrinsic(mulWithOverflow, result, base);
      result = b_.CreateSelect(bit, b_.CreateExtractValue(product, 0), result);
      overflow = b_.CreateOr(overflow, b_.CreateAnd(bit, b_.CreateOr(b_.CreateExtractValue(product, 1), baseOverflow)));
      if (i + 1 == steps) break;
      llvm::Value* square = b_.CreateBinaryIntrinsic(mulWithOverflow, base, base);
      base = b_.CreateExtractValue(square, 0);
      baseOverflow = b_.CreateOr(baseOverflow, b_.CreateExtractValue(square, 1));
    }
    if (!isSigned) return b_.CreateSelect(overflow, constant(llvm::APInt::getMaxValue(width)), result);
    llvm::Value* odd = b_.CreateICmpNE(b_.CreateAnd(y, one), zero);
    llvm::Value* max = constant(llvm::APInt::getSignedMaxValue(width));
    llvm::Value* negative = b_.CreateAnd(b_.CreateICmpSLT(x, zero), odd);
    llvm::Value* saturated = b_.CreateSelect(negative, constant(llvm::APInt::getSignedMinValue(width)), max);
    llvm::Value* positive = b_.CreateSelect(overflow, saturated, result);
    llvm::Value* minusOne = small(-1);
    llvm::Value* reciprocal = b_.CreateSelect(
        b_.CreateICmpEQ(x, zero), max,
        b_.CreateSelect(b_.CreateICmpEQ(x, one), one,
                        b_.CreateSelect(b_.CreateICmpEQ(x, minusOne), b_.CreateSelect(odd, minusOne, one), zero)));
    return b_.CreateSelect(b_.CreateICmpSLT(y, zero), reciprocal, positive);
  }

  // Integer division and remainder that never trap: x / 0 is 0 and x % 0 is 0;
  // INT_MIN / -1 wraps (the divisor -1 is handled without dividing).
  llvm::Value* safeDivisor(llvm::Value* y, bool isSigned) {
    llvm::Value* zero = llvm::ConstantInt::get(y->getType(), 0);
    llvm::Value* one = llvm::ConstantInt::get(y->getType(), 1);
    llvm::Value* bad = b_.CreateICmpEQ(y, zero);
    if (isSigned) bad = b_.CreateOr(bad, b_.CreateICmpEQ(y, llvm::ConstantInt::getSigned(y->getType(), -1)));
    return b_.CreateSelect(bad, one, y);
  }

  llvm::Value* intDivRem(BinaryOp op, llvm::Value* x, llvm::Value* y, bool isSigned) {
    llvm::Type* t = x->getType();
    llvm::Value* zero = llvm::ConstantInt::get(t, 0);
    llvm::Value* d = safeDivisor(y, isSigned);
    llvm::Value* q = isSigned ? b_.CreateSDiv(x, d) : b_.CreateUDiv(x, d);
    llvm::Value* r = isSigned ? b_.CreateSRem(x, d) : b_.CreateURem(x, d);
    llvm::Value* byZero = b_.CreateICmpEQ(y, zero);
    if (isSigned) {
      llvm::Value* byMinusOne = b_.CreateICmpEQ(y, llvm::ConstantInt::getSigned(t, -1));
      q = b_.CreateSelect(byMinusOne, b_.CreateNeg(x), q);
      r = b_.CreateSelect(byMinusOne, zero, r);
      // Floor variants: adjust when the remainder's sign differs from the divisor's.
      llvm::Value* adjust = b_.CreateAnd(b_.CreateICmpNE(r, zero),
                                         b_.CreateICmpNE(b_.CreateICmpSLT(r, zero), b_.CreateICmpSLT(y, zero)));
      if (op == BinaryOp::FloorDiv) q = b_.CreateSelect(adjust, b_.CreateSub(q, llvm::ConstantInt::get(t, 1)), q);
      if (op == BinaryOp::FloorMod) r = b_.CreateSelect(adjust, b_.CreateAdd(r, y), r);
    }
    llvm::Value* v = (op == BinaryOp::Div || op == BinaryOp::FloorDiv) ? q : r;
    return b_.CreateSelect(byZero, zero, v);
  }

  llvm::Value* emitBinary(BinaryOp op, llvm::Value* x, llvm::Value* y, DType t) {
    bool flt = isFloat(t), uns = isUnsigned(t);
    switch (op) {
      case BinaryOp::Add: return flt ? b_.CreateFAdd(x, y) : b_.CreateAdd(x, y);
      case BinaryOp::Sub: return flt ? b_.CreateFSub(x, y) : b_.CreateSub(x, y);
      case BinaryOp::Mul: return flt ? b_.CreateFMul(x, y) : b_.CreateMul(x, y);
      case BinaryOp::Div:
      case BinaryOp::Mod:
      case BinaryOp::FloorDiv:
      case BinaryOp::FloorMod:
        if (!flt) return intDivRem(op, x, y, !uns);
        if (op == BinaryOp::Div) return b_.CreateFDiv(x, y);
        if (op == BinaryOp::FloorDiv) return intrinsic(llvm::Intrinsic::floor, b_.CreateFDiv(x, y));
        if (op == BinaryOp::Mod) return b_.CreateFRem(x, y);
        {
          llvm::Value* r = b_.CreateFRem(x, y);
          llvm::Value* zero = llvm::ConstantFP::get(x->getType(), 0.0);
          llvm::Value* adjust = b_.CreateAnd(b_.CreateFCmpONE(r, zero),
                                             b_.CreateICmpNE(b_.CreateFCmpOLT(r, zero), b_.CreateFCmpOLT(y, zero)));
          return b_.CreateSelect(adjust, b_.CreateFAdd(r, y), r);
        }
      case BinaryOp::Pow:
        return flt ? powOf(x, y) : intPower(x, y, !uns);
      case BinaryOp::Max:
        if (flt) return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, x, y);
        return b_.CreateBinaryIntrinsic(uns ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, x, y);
      case BinaryOp::Min:
        if (flt) return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, x, y);
        return b_.CreateBinaryIntrinsic(uns ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, x, y);
      case BinaryOp::Eq: return flt ? b_.CreateFCmpOEQ(x, y) : b_.CreateICmpEQ(x, y);
      case BinaryOp::Ne: return flt ? b_.CreateFCmpUNE(x, y) : b_.CreateICmpNE(x, y);
      case BinaryOp::Lt: return flt ? b_.CreateFCmpOLT(x, y) : uns ? b_.CreateICmpULT(x, y) : b_.CreateICmpSLT(x, y);
      case BinaryOp::Le: return flt ? b_.CreateFCmpOLE(x, y) : uns ? b_.CreateICmpULE(x, y) : b_.CreateICmpSLE(x, y);
      case BinaryOp::Gt: return flt ? b_.CreateFCmpOGT(x, y) : uns ? b_.CreateICmpUGT(x, y) : b_.CreateICmpSGT(x, y);
      case BinaryOp::Ge: return flt ? b_.CreateFCmpOGE(x, y) : uns ? b_.CreateICmpUGE(x, y) : b_.CreateICmpSGE(x, y);
      case BinaryOp::And: return b_.CreateAnd(x, y);
      case BinaryOp::Or: return b_.CreateOr(x, y);
    }
    throw Error("internal: unknown binary operator");
  }

  llvm::Value* emitCast(llvm::Value* x, DType from, DType to) {
    llvm::Type* t = valueType(to);
    if (x->getType() == t) {
      return x;
    }
    bool fromFloat = isFloat(from), toFloat = isFloat(to);
    if (isBool(to)) return fromFloat ? b_.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0.0))
                                     : b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
    if (fromFloat && toFloat) return b_.CreateFPCast(x, t);
    if (!fromFloat && toFloat) return isUnsigned(from) ? b_.CreateUIToFP(x, t) : b_.CreateSIToFP(x, t);
    if (fromFloat) {
      // Saturating: NaN gives 0 and out-of-range values clamp, never undefined behaviour.
      return b_.CreateIntrinsic(isUnsigned(to) ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat,
                                {t, x->getType()}, {x});
    }
    return b_.CreateIntCast(x, t, !isUnsigned(from));
  }

  llvm::Value* reduceInit(loop::ReduceOp op, DType t) {
    llvm::Type* ty = valueType(t);
    bool flt = isFloat(t);
    switch (op) {
      case loop::ReduceOp::Sum: return flt ? llvm::ConstantFP::get(ty, 0.0) : llvm::ConstantInt::get(ty, 0);
      case loop::ReduceOp::Prod: return flt ? llvm::ConstantFP::get(ty, 1.0) : llvm::ConstantInt::get(ty, 1);
      case loop::ReduceOp::Max:
        if (flt) return llvm::ConstantFP::getInfinity(ty, true);
        return isUnsigned(t) ? llvm::ConstantInt::get(ty, 0) : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()));
      case loop::ReduceOp::Min:
        if (flt) return llvm::ConstantFP::getInfinity(ty, false);
        return isUnsigned(t) ? llvm::ConstantInt::get(ty, llvm::APInt::getMaxValue(ty->getIntegerBitWidth()))
                             : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMaxValue(ty->getIntegerBitWidth()));
      case loop::ReduceOp::All: return b_.getTrue();
      case loop::ReduceOp::Any: return b_.getFalse();
      default: break;
    }
    return nullptr;
  }

  llvm::Value* reduceCombine(loop::ReduceOp op, DType t, llvm::Value* acc, llvm::Value* v) {
    bool flt = isFloat(t);
    llvm::FastMathFlags fmf;
    fmf.setAllowReassoc();  // lets the vectorizer reorder the reduction
    llvm::IRBuilderBase::FastMathFlagGuard guard(b_);
    b_.setFastMathFlags(fmf);
    switch (op) {
      case loop::ReduceOp::Sum: return emitBinary(BinaryOp::Add, acc, v, t);
      case loop::ReduceOp::Prod: return emitBinary(BinaryOp::Mul, acc, v, t);
      case loop::ReduceOp::Max: return emitBinary(BinaryOp::Max, acc, v, t);
      case loop::ReduceOp::Min: return emitBinary(BinaryOp::Min, acc, v, t);
      case loop::ReduceOp::All: return b_.CreateAnd(acc, v);
      case loop::ReduceOp::Any: return b_.CreateOr(acc, v);
      default: break;
    }
    (void)flt;
    return nullptr;
  }

  struct Accumulator {
    llvm::AllocaInst* value;
    llvm::AllocaInst* index;  // ArgMax/ArgMin: position of the best value so far
    llvm::AllocaInst* count;  // ArgMax/ArgMin: position of the current element
    llvm::AllocaInst* sawNaN = nullptr;  // float Max/Min: whether any element was NaN
  };

  llvm::Value* emitReduce(const ExprNode& n) {
    auto op = static_cast<loop::ReduceOp>(n.op);
    bool arg = op == loop::ReduceOp::ArgMax || op == loop::ReduceOp::ArgMin;
    DType valueType_ = arg ? k_.expr(n.a).type : n.type;
    llvm::Type* ty = valueType(valueType_);
    // Accumulators are stack slots in the entry block; mem2reg makes them registers.
    llvm::IRBuilder<> entryB(entry_, entry_->begin());
    Accumulator acc{entryB.CreateAlloca(ty), nullptr, nullptr};
    loop::ReduceOp valueOp = op == loop::ReduceOp::ArgMax ? loop::ReduceOp::Max
                             : op == loop::ReduceOp::ArgMin ? loop::ReduceOp::Min
                                                            : op;
    b_.CreateStore(reduceInit(valueOp, valueType_), acc.value);
    // Float max/min: maxnum/minnum (which skip NaN and vectorize) plus a flag that
    // restores NaN propagation at the end.
    bool floatExtreme = !arg && isFloat(valueType_) && (op == loop::ReduceOp::Max || op == loop::ReduceOp::Min);
    if (floatExtreme) {
      acc.sawNaN = entryB.CreateAlloca(b_.getInt1Ty());
      b_.CreateStore(b_.getFalse(), acc.sawNaN);
    }
    if (arg) {
      acc.index = entryB.CreateAlloca(b_.getInt64Ty());
      acc.count = entryB.CreateAlloca(b_.getInt64Ty());
      b_.CreateStore(b_.getInt64(0), acc.index);
      b_.CreateStore(b_.getInt64(0), acc.count);
    }
    bool split = !arg && splitReduction(n);
    emitReduceLevel(n, 0, acc, op, valueType_, split);
    if (arg) return b_.CreateLoad(b_.getInt64Ty(), acc.index);
    llvm::Value* result = b_.CreateLoad(ty, acc.value);
    if (split) result = combineSplit(valueOp, valueType_, result);
    if (acc.sawNaN) {
      llvm::Value* nan = b_.CreateLoad(b_.getInt1Ty(), acc.sawNaN);
      if (split) nan = combineSplit(loop::ReduceOp::Any, DType::Bool, nan);
      result = b_.CreateSelect(nan, llvm::ConstantFP::getNaN(ty), result);
    }
    return result;
  }

  void emitReduceLevel(const ExprNode& n, int64_t level, const Accumulator& acc, loop::ReduceOp op, DType vt,
                       bool split = false) {
    if (level == n.ival) {
      llvm::Value* v = emitExpr(n.a);
      llvm::Value* cur = b_.CreateLoad(acc.value->getAllocatedType(), acc.value);
      if (acc.sawNaN) {
        bool isMax = op == loop::ReduceOp::Max;
        // nnan+nsz let LLVM recognize (and vectorize) the reduction. A NaN makes the
        // accumulator poison, but then the NaN flag selects NaN for the result.
        llvm::FastMathFlags fmf;
        fmf.setNoNaNs();
        fmf.setNoSignedZeros();
        llvm::Value* m = b_.CreateBinaryIntrinsic(isMax ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, cur, v);
        llvm::cast<llvm::Instruction>(m)->setFastMathFlags(fmf);
        b_.CreateStore(m, acc.value);
        llvm::Value* flag = b_.CreateLoad(b_.getInt1Ty(), acc.sawNaN);
        b_.CreateStore(b_.CreateOr(flag, b_.CreateFCmpUNO(v, v)), acc.sawNaN);
        return;
      }
      if (!acc.index) {
        b_.CreateStore(reduceCombine(op, vt, cur, v), acc.value);
        return;
      }
      // Strictly better (or the first NaN) replaces the best: the first extreme wins.
      bool isMax = op == loop::ReduceOp::ArgMax;
      llvm::Value* better;
      if (isFloat(vt)) {
        llvm::Value* strict = isMax ? b_.CreateFCmpOGT(v, cur) : b_.CreateFCmpOLT(v, cur);
        better = b_.CreateOr(strict, b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpORD(cur, cur)));
      } else {
        bool uns = isUnsigned(vt);
        better = isMax ? (uns ? b_.CreateICmpUGT(v, cur) : b_.CreateICmpSGT(v, cur))
                       : (uns ? b_.CreateICmpULT(v, cur) : b_.CreateICmpSLT(v, cur));
      }
      llvm::Value* pos = b_.CreateLoad(b_.getInt64Ty(), acc.count);
      // The first element always sets the best (the initial value is only a placeholder).
      better = b_.CreateOr(better, b_.CreateICmpEQ(pos, b_.getInt64(0)));
      b_.CreateStore(b_.CreateSelect(better, v, cur), acc.value);
      b_.CreateStore(b_.CreateSelect(better, pos, b_.CreateLoad(b_.getInt64Ty(), acc.index)), acc.index);
      b_.CreateStore(b_.CreateAdd(pos, b_.getInt64(1)), acc.count);
      return;
    }
    if (split && level == 0 && n.ival > 1 && rectangular(n)) {
      splitFlattened(n, acc, op, vt);
      return;
    }
    size_t at = static_cast<size_t>(n.c + level);
    // (A level shared among threads keeps its loop: each thread takes its own iterations.)
    if (!(split && level == 0) && unrollsWhole(n, level)) {
      // Straight-line steps, one per value of this level's variable: expressions
      // computed in a step (some of them using the variable) are forgotten after it.
      std::vector<ExprId>& scope = scopes_.back();
      const size_t mark = scope.size();
      const auto var = static_cast<size_t>(k_.reduceVars[at]);
      int64_t extent = k_.expr(k_.reduceExtents[at]).ival;
      for (int64_t v = 0; v < extent; ++v) {
        vars_[var] = b_.getInt64(v);
        varDepth_[var] = static_cast<int>(scopes_.size()) - 1;
        emitReduceLevel(n, level + 1, acc, op, vt);
        for (size_t i = mark; i < scope.size(); ++i) cache_[static_cast<size_t>(scope[i])] = nullptr;
        scope.resize(mark);
      }
      vars_[var] = nullptr;
      varDepth_[var] = -1;
      return;
    }
    llvm::Value* extent = emitExpr(k_.reduceExtents[at]);
    // Arg reductions carry a position through the loop: left scalar.
    LoopHint hint = level + 1 == n.ival && !acc.index ? LoopHint::VectorizeReduction : LoopHint::Auto;
    bool share = split && level == 0;
    emitLoop(k_.reduceVars[at], extent, hint, [&] { emitReduceLevel(n, level + 1, acc, op, vt); },
             share ? splitBegin() : nullptr, share ? splitStep() : nullptr);
  }

  // A reduction over a small window (a 2x2 or 3x3 pooling window: at most
  // kMaxUnrolledReduction elements, its innermost extent under a vector) is
  // emitted without loops from `level` in: its loops inside the output loop kept
  // that loop from being innermost, so nothing vectorized (a 2x2 max pool ran at
  // 6 ns an output). A longer innermost extent keeps its loop, which vectorizes
  // along the reduction (a row of a mean) rather than across outputs.
  static constexpr int64_t kMaxUnrolledReduction = 16;
  static constexpr int64_t kMinVectorizedReduction = 8;
  bool unrollsWhole(const ExprNode& n, int64_t level) const {
    int64_t total = 1;
    for (int64_t l = level; l < n.ival; ++l) {
      const ExprNode& e = k_.expr(k_.reduceExtents[static_cast<size_t>(n.c + l)]);
      if (e.kind != ExprKind::IntConst || e.ival < 0 || e.ival > kMaxUnrolledReduction) return false;
      total *= e.ival;
      if (total > kMaxUnrolledReduction) return false;
      if (l + 1 == n.ival && e.ival >= kMinVectorizedReduction) return false;
    }
    return true;
  }

  // Whether no extent of the reduction depends on the reduction's own variables.
  bool rectangular(const ExprNode& n) const {
    std::vector<int32_t> own(k_.reduceVars.begin() + n.c, k_.reduceVars.begin() + n.c + n.ival);
    std::vector<ExprId> stack(k_.reduceExtents.begin() + n.c, k_.reduceExtents.begin() + n.c + n.ival);
    while (!stack.empty()) {
      const ExprNode& e = k_.expr(stack.back());
      stack.pop_back();
      if (e.kind == ExprKind::Var && std::find(own.begin(), own.end(), e.a) != own.end()) return false;
      if (e.kind == ExprKind::IntConst || e.kind == ExprKind::FloatConst || e.kind == ExprKind::Dim || e.kind == ExprKind::Var) continue;
      for (ExprId c : {e.kind == ExprKind::Load ? e.b : e.a, e.kind == ExprKind::Load ? -1 : e.b, e.c})
        if (c >= 0 && !(e.kind == ExprKind::Reduce && c != e.a)) stack.push_back(c);
    }
    return true;
  }

  // A split reduction over several loops: one flat index over all of them,
  // shared among the threads, each variable recovered by division.
  void splitFlattened(const ExprNode& n, const Accumulator& acc, loop::ReduceOp op, DType vt) {
    std::vector<llvm::Value*> extents;
    llvm::Value* total = b_.getInt64(1);
    for (int64_t l = 0; l < n.ival; ++l) {
      extents.push_back(emitExpr(k_.reduceExtents[static_cast<size_t>(n.c + l)]));
      total = b_.CreateMul(total, extents.back());
    }
    auto varAt = [&](int64_t l) { return static_cast<size_t>(k_.reduceVars[static_cast<size_t>(n.c + l)]); };
    size_t last = varAt(n.ival - 1);
    emitLoop(static_cast<int32_t>(last), total, LoopHint::Auto, [&] {
      llvm::Value* rest = vars_[last];
      int depth = static_cast<int>(scopes_.size()) - 1;
      for (int64_t l = n.ival; l-- > 0;) {
        vars_[varAt(l)] = l == 0 ? rest : b_.CreateURem(rest, extents[static_cast<size_t>(l)]);
        varDepth_[varAt(l)] = depth;
        if (l) rest = b_.CreateUDiv(rest, extents[static_cast<size_t>(l)]);
      }
      emitReduceLevel(n, n.ival, acc, op, vt);
      for (int64_t l = 0; l + 1 < n.ival; ++l) {
        vars_[varAt(l)] = nullptr;
        varDepth_[varAt(l)] = -1;
      }
    }, splitBegin(), splitStep());
  }

  const loop::LoopKernel& k_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  llvm::Module* m_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::vector<llvm::Value*> cache_;
  std::vector<llvm::Value*> vars_;
  std::vector<std::vector<ExprId>> scopes_;
  size_t loopsEmitted_ = 0;
  std::vector<int> varDepth_;                   // scope index where a loop variable is bound, -1 if not
  std::vector<llvm::BasicBlock*> preheaders_;   // per open loop: the block that enters it
};

}  // namespace kiln::jit
