// LoopKernel -> LLVM IR for the host CPU.
#include "jit/cpu_codegen.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Host.h>

#include <cmath>
#include <limits>

#include "jit/vector_math.h"
#include "kiln/error.h"

namespace kiln::jit {

using loop::BinaryOp;
using loop::ExprId;
using loop::ExprKind;
using loop::ExprNode;
using loop::StmtKind;
using loop::UnaryOp;

const CpuTarget& hostTarget() {
  static const CpuTarget target = [] {
    CpuTarget t;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = llvm::sys::getHostCPUName().str();
    std::string features;
    for (const auto& f : llvm::sys::getHostCPUFeatures()) {
      if (!features.empty()) features += ",";
      features += (f.second ? "+" : "-") + f.first().str();
    }
    t.features = features;
    return t;
  }();
  return target;
}

namespace {

class CpuCodegen {
 public:
  CpuCodegen(const loop::LoopKernel& k, llvm::LLVMContext& ctx, const CpuTarget& target)
      : k_(k), ctx_(ctx), b_(ctx), target_(target) {}

  std::unique_ptr<llvm::Module> run(const std::string& symbol) {
    auto m = std::make_unique<llvm::Module>(symbol, ctx_);
    m_ = m.get();
    m->setTargetTriple(target_.triple);
    llvm::Type* ptr = b_.getPtrTy();

    // The body: noalias buffer pointers, then the shape array.
    std::vector<llvm::Type*> params(k_.buffers.size(), ptr);
    params.push_back(ptr);
    auto* bodyTy = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(bodyTy, llvm::Function::InternalLinkage, symbol + ".body", m.get());
    setAttributes(fn_);
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoCapture);
      if (!k_.buffers[i].output) fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
    }
    fn_->addParamAttr(static_cast<unsigned>(k_.buffers.size()), llvm::Attribute::ReadOnly);
    fn_->addParamAttr(static_cast<unsigned>(k_.buffers.size()), llvm::Attribute::NoAlias);
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    cache_.assign(k_.exprs.size(), nullptr);
    vars_.assign(static_cast<size_t>(k_.numVars), nullptr);
    scopes_.emplace_back();
    if (k_.body >= 0) emitStmt(k_.body);
    b_.CreateRetVoid();

    // The entry point: unpack the buffer array and call the body (inlined at -O3).
    auto* entryTy = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr}, false);
    auto* entry = llvm::Function::Create(entryTy, llvm::Function::ExternalLinkage, symbol, m.get());
    setAttributes(entry);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", entry));
    std::vector<llvm::Value*> args;
    for (size_t i = 0; i < k_.buffers.size(); ++i)
      args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), i)));
    args.push_back(entry->getArg(1));
    b_.CreateCall(fn_, args);
    b_.CreateRetVoid();
    return m;
  }

 private:
  void setAttributes(llvm::Function* f) {
    f->addFnAttr(llvm::Attribute::NoUnwind);
    f->addFnAttr("target-cpu", target_.cpu);
    f->addFnAttr("target-features", target_.features);
    f->addFnAttr("prefer-vector-width", "512");
  }

  // ---- types ----
  llvm::Type* valueType(DType t) {
    switch (t) {
      case DType::Float16:
      case DType::Float32: return b_.getFloatTy();
      case DType::Float64: return b_.getDoubleTy();
      case DType::Int8:
      case DType::UInt8: return b_.getInt8Ty();
      case DType::Int16: return b_.getInt16Ty();
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
  static bool isUnsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }

  // ---- statements ----
  void emitStmt(loop::StmtId id) {
    const loop::StmtNode& s = k_.stmt(id);
    switch (s.kind) {
      case StmtKind::Block:
        for (loop::StmtId c : s.body) emitStmt(c);
        return;
      case StmtKind::Store: {
        const loop::BufferDecl& buf = k_.buffers[static_cast<size_t>(s.buffer)];
        llvm::Value* v = emitExpr(s.value);
        if (buf.dtype == DType::Float16) v = b_.CreateFPTrunc(v, b_.getHalfTy());
        if (buf.dtype == DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
        llvm::Value* p = b_.CreateInBoundsGEP(memoryType(buf.dtype), fn_->getArg(static_cast<unsigned>(s.buffer)),
                                              emitExpr(s.index));
        b_.CreateStore(v, p);
        return;
      }
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
        llvm::Value* extent = emitExpr(s.extent);
        emitLoop(s.var, extent, s.loop == loop::LoopKind::Vectorized ? LoopHint::Vectorize : LoopHint::NoVectorize, [&] {
          for (loop::StmtId c : s.body) emitStmt(c);
        });
        return;
      }
    }
  }

  // for (var = 0; var < extent; ++var) body(); caches of values computed inside are dropped after.
  // Vectorize: ask for vectorization; NoVectorize: forbid it (loops whose
  // vectorization would only cost compile time); Auto: leave it to LLVM.
  enum class LoopHint { Vectorize, NoVectorize, Auto };

  template <class Body>
  void emitLoop(int32_t var, llvm::Value* extent, LoopHint hint, Body&& body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* bodyBB = llvm::BasicBlock::Create(ctx_, "body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i" + std::to_string(var));
    i->addIncoming(b_.getInt64(0), pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, extent), bodyBB, exit);
    b_.SetInsertPoint(bodyBB);
    vars_[static_cast<size_t>(var)] = i;
    scopes_.emplace_back();
    body();
    for (ExprId e : scopes_.back()) cache_[static_cast<size_t>(e)] = nullptr;
    scopes_.pop_back();
    llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
    auto* back = b_.CreateBr(header);
    i->addIncoming(next, b_.GetInsertBlock());
    if (hint != LoopHint::Auto) {
      llvm::MDNode* enable = llvm::MDNode::get(
          ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"),
                 llvm::ConstantAsMetadata::get(hint == LoopHint::Vectorize ? b_.getTrue() : b_.getFalse())});
      llvm::MDNode* progress = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.mustprogress")});
      // One vector iteration per loop trip: interleaving multiplies code (and compile
      // time) for little gain in loops that are bound by memory or by math.
      llvm::MDNode* interleave = llvm::MDNode::get(
          ctx_, {llvm::MDString::get(ctx_, "llvm.loop.interleave.count"), llvm::ConstantAsMetadata::get(b_.getInt32(1))});
      // No unrolling either: a short static trip count would otherwise be unrolled
      // into several copies of the (math-heavy) vector body.
      llvm::MDNode* noUnroll = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")});
      auto* loopID = llvm::MDNode::getDistinct(ctx_, {nullptr, enable, progress, interleave, noUnroll});
      loopID->replaceOperandWith(0, loopID);
      back->setMetadata(llvm::LLVMContext::MD_loop, loopID);
    }
    b_.SetInsertPoint(exit);
  }

  // ---- expressions ----
  llvm::Value* emitExpr(ExprId id) {
    llvm::Value*& slot = cache_[static_cast<size_t>(id)];
    if (slot) return slot;
    llvm::Value* v = emitNode(k_.expr(id));
    cache_[static_cast<size_t>(id)] = v;
    scopes_.back().push_back(id);
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

  llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::Value* x) { return b_.CreateUnaryIntrinsic(id, x); }

  llvm::Value* libmCall(const char* name, llvm::Value* x) {
    llvm::Type* t = x->getType();
    llvm::FunctionCallee f = m_->getOrInsertFunction(name, llvm::FunctionType::get(t, {t}, false));
    return b_.CreateCall(f, {x});
  }

  llvm::Value* emitUnary(UnaryOp op, llvm::Value* x, DType t) {
    bool f32 = t == DType::Float32, flt = isFloat(t);
    switch (op) {
      case UnaryOp::Neg: return flt ? b_.CreateFNeg(x) : b_.CreateNeg(x);
      case UnaryOp::Exp: return f32 ? emitExpF32(b_, x) : intrinsic(llvm::Intrinsic::exp, x);
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
        if (flt) return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y);
        {
          llvm::Value* fx = uns ? b_.CreateUIToFP(x, b_.getDoubleTy()) : b_.CreateSIToFP(x, b_.getDoubleTy());
          llvm::Value* fy = uns ? b_.CreateUIToFP(y, b_.getDoubleTy()) : b_.CreateSIToFP(y, b_.getDoubleTy());
          llvm::Value* p = b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, fx, fy);
          return b_.CreateIntrinsic(uns ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat,
                                    {x->getType(), b_.getDoubleTy()}, {p});
        }
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
    }
    (void)flt;
    return nullptr;
  }

  llvm::Value* emitReduce(const ExprNode& n) {
    auto op = static_cast<loop::ReduceOp>(n.op);
    llvm::Type* ty = valueType(n.type);
    // The accumulator is a stack slot in the entry block; mem2reg makes it a register.
    llvm::IRBuilder<> entryB(entry_, entry_->begin());
    llvm::AllocaInst* acc = entryB.CreateAlloca(ty);
    b_.CreateStore(reduceInit(op, n.type), acc);
    emitReduceLevel(n, 0, acc, op);
    return b_.CreateLoad(ty, acc);
  }

  void emitReduceLevel(const ExprNode& n, int64_t level, llvm::AllocaInst* acc, loop::ReduceOp op) {
    if (level == n.ival) {
      llvm::Value* v = emitExpr(n.a);
      b_.CreateStore(reduceCombine(op, n.type, b_.CreateLoad(acc->getAllocatedType(), acc), v), acc);
      return;
    }
    size_t at = static_cast<size_t>(n.c + level);
    llvm::Value* extent = emitExpr(k_.reduceExtents[at]);
    emitLoop(k_.reduceVars[at], extent, level + 1 == n.ival ? LoopHint::Vectorize : LoopHint::Auto,
             [&] { emitReduceLevel(n, level + 1, acc, op); });
  }

  const loop::LoopKernel& k_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const CpuTarget& target_;
  llvm::Module* m_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::vector<llvm::Value*> cache_;
  std::vector<llvm::Value*> vars_;
  std::vector<std::vector<ExprId>> scopes_;
};

}  // namespace

std::unique_ptr<llvm::Module> emitCpuModule(const loop::LoopKernel& k, llvm::LLVMContext& ctx,
                                            const std::string& symbol, const CpuTarget& target) {
  return CpuCodegen(k, ctx, target).run(symbol);
}

}  // namespace kiln::jit
