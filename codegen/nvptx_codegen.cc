// LoopKernel -> PTX: the grid mapping, the GPU Gemm, libdevice math, and the
// NVPTX target machine that optimizes the module and prints PTX.
#include "codegen/nvptx_codegen.h"

#include "codegen/llvm_diagnostics.h"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <cstdlib>
#include <mutex>

#include "codegen/cpu_object.h"
#include "codegen/loop_emitter.h"

#ifndef KILN_CUDA_ROOT
#define KILN_CUDA_ROOT "/usr/local/cuda"
#endif

namespace kiln::jit {

namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

// Tiles of the GPU Gemm: a block computes kTileM x kTileN of C with
// kGemmThreads threads, kThreadM x kThreadN each, over K-slices of kTileK.
constexpr int kTileM = 128, kTileN = 128, kTileK = 8, kThreadM = 8, kThreadN = 8;
constexpr int kGemmThreads = (kTileM / kThreadM) * (kTileN / kThreadN);
// Threads per block of the Rows mapping (a multiple of the warp size).
constexpr int kRowThreads = 256;
static_assert(kGemmThreads == kGpuBlockThreads && kRowThreads == kGpuBlockThreads, "the plan launches blocks of this size");

class NvptxCodegen final : public LoopEmitter {
 public:
  using LoopEmitter::LoopEmitter;

  std::unique_ptr<llvm::Module> run(const std::string& symbol, const PtxModule& plan) {
    auto m = std::make_unique<llvm::Module>(symbol, ctx_);
    m_ = m.get();
    m->setTargetTriple(kTriple);
    hostVars_ = plan.hostVars;
    for (const PtxLaunch& l : plan.launches) {
      beginEntry(l, l.entry);
      const loop::StmtNode& s = k_.stmt(l.stmt);
      switch (l.mapping) {
        case GpuMapping::Flat: flat(l, threadIndex(), threadCount()); break;
        case GpuMapping::Rows: rows(l); break;
        case GpuMapping::Gemm: tiledGemm(s.gemm); break;
        case GpuMapping::Single: {
          auto* work = llvm::BasicBlock::Create(ctx_, "work", fn_);
          auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
          b_.CreateCondBr(b_.CreateICmpEQ(threadIndex(), b_.getInt64(0)), work, done);
          b_.SetInsertPoint(work);
          emitStmt(l.stmt);
          b_.CreateBr(done);
          b_.SetInsertPoint(done);
          break;
        }
      }
      b_.CreateRetVoid();
      if (l.mapping != GpuMapping::Gemm) continue;
      beginEntry(l, skinnyEntry(l));
      skinnyGemm(s.gemm);
      b_.CreateRetVoid();
    }
    return m;
  }

 private:
  // Entry point `name` of launch `l`: host loop variables bound to its trailing
  // arguments, a Gemm's batch variable to the grid's z.
  void beginEntry(const PtxLaunch& l, const std::string& name) {
    beginFunction(makeKernel(name));
    for (size_t i = 0; i < hostVars_.size(); ++i) {
      auto v = static_cast<size_t>(hostVars_[i]);
      vars_[v] = fn_->getArg(static_cast<unsigned>(k_.buffers.size() + 1 + i));
      varDepth_[v] = 0;
    }
    if (l.mapping == GpuMapping::Gemm && l.batchVar >= 0) {
      vars_[static_cast<size_t>(l.batchVar)] = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z);
      varDepth_[static_cast<size_t>(l.batchVar)] = 0;
    }
  }

  llvm::Function* makeKernel(const std::string& name) {
    llvm::Type* ptr = b_.getPtrTy();
    std::vector<llvm::Type*> params(k_.buffers.size() + 1, ptr);
    params.insert(params.end(), hostVars_.size(), b_.getInt64Ty());
    auto* f = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                     llvm::Function::ExternalLinkage, name, m_);
    f->setCallingConv(llvm::CallingConv::PTX_Kernel);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      f->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      if (!k_.buffers[i].output) f->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
    }
    // The shapes travel by value in the parameter space: no copy before a launch.
    auto shapes = static_cast<unsigned>(k_.buffers.size());
    llvm::Type* array = llvm::ArrayType::get(b_.getInt64Ty(), static_cast<uint64_t>(std::max(k_.numShapeSlots, 1)));
    f->addParamAttr(shapes, llvm::Attribute::getWithByValType(ctx_, array));
    f->addParamAttr(shapes, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(8)));
    return f;
  }

  llvm::Value* sreg(llvm::Intrinsic::ID id) { return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty()); }
  llvm::Value* tid() { return sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x); }
  llvm::Value* ntid() { return sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x); }
  // This thread's index in the whole launch, and the launch's thread count.
  llvm::Value* threadIndex() {
    return b_.CreateAdd(b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), ntid()), tid());
  }
  llvm::Value* threadCount() { return b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x), ntid()); }
  void barrier() { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }

  // The launch's loops as one index from `begin` by `step`, each variable
  // recovered by division; then the innermost loop's body.
  void flat(const PtxLaunch& l, llvm::Value* begin, llvm::Value* step) {
    std::vector<llvm::Value*> extents;
    llvm::Value* total = b_.getInt64(1);
    for (ExprId e : l.extents) {
      extents.push_back(emitExpr(e));
      total = b_.CreateMul(total, extents.back());
    }
    const std::vector<loop::StmtId>& body = innermost(l);
    if (l.loopVars.empty()) {
      // One row (a statement outside any loop): block 0 does it.
      auto* work = llvm::BasicBlock::Create(ctx_, "row", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
      b_.CreateCondBr(b_.CreateICmpEQ(begin, b_.getInt64(0)), work, done);
      b_.SetInsertPoint(work);
      rowScope_ = 0;
      rowLoops_ = 0;
      for (loop::StmtId c : body) emitStmt(c);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      return;
    }
    int32_t last = l.loopVars.back();
    emitLoop(last, total, LoopHint::Auto, [&] {
      llvm::Value* rest = vars_[static_cast<size_t>(last)];
      int depth = static_cast<int>(scopes_.size()) - 1;
      for (size_t i = l.loopVars.size(); i-- > 0;) {
        auto v = static_cast<size_t>(l.loopVars[i]);
        vars_[v] = i == 0 ? rest : b_.CreateURem(rest, extents[i]);
        varDepth_[v] = depth;
        if (i) rest = b_.CreateUDiv(rest, extents[i]);
      }
      rowScope_ = depth;
      rowLoops_ = 1;
      for (loop::StmtId c : body) emitStmt(c);
      for (size_t i = 0; i + 1 < l.loopVars.size(); ++i) {
        vars_[static_cast<size_t>(l.loopVars[i])] = nullptr;
        varDepth_[static_cast<size_t>(l.loopVars[i])] = -1;
      }
    }, begin, step);
  }

  const std::vector<loop::StmtId>& innermost(const PtxLaunch& l) {
    if (l.loopVars.empty()) {
      single_stmt_.assign(1, l.stmt);
      return single_stmt_;
    }
    loop::StmtId id = l.stmt;
    for (size_t i = 1; i < l.loopVars.size(); ++i) id = k_.stmt(id).body[0];
    return k_.stmt(id).body;
  }

  // A block per row, grid-stride over rows; the hooks below share the row's
  // work among the block's threads.
  void rows(const PtxLaunch& l) {
    rows_ = true;
    flat(l, sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x));
    rows_ = false;
  }

  // In a row's own scope, with no shared-out loop open: every thread of the
  // block runs this code, so it may split work and wait at barriers.
  bool rowUniform() const {
    int here = static_cast<int>(scopes_.size()) - 1;
    return rows_ && here == rowScope_ && (sharedScope_ < 0 || here < sharedScope_);
  }

  void emitInnerFor(const loop::StmtNode& s, LoopHint hint) override {
    if (!rows_ || static_cast<int>(preheaders_.size()) != rowLoops_ || sharedScope_ >= 0) {
      LoopEmitter::emitInnerFor(s, hint);
      return;
    }
    // A loop of the row: threads take its iterations in turn (they are
    // independent: every lowered loop writes distinct elements), then wait, so
    // the next statement sees all of them.
    sharedScope_ = static_cast<int>(scopes_.size());
    emitLoop(s.var, emitExpr(s.extent), LoopHint::Auto, [&] {
      for (loop::StmtId c : s.body) emitStmt(c);
    }, tid(), ntid());
    sharedScope_ = -1;
    barrier();
  }

  void emitStore(const loop::StmtNode& s) override {
    if (!rows_ || static_cast<int>(preheaders_.size()) != rowLoops_ || sharedScope_ >= 0) {
      storeValue(s);
      return;
    }
    // A store of the row itself: every thread computes the value (its
    // reductions need the whole block), thread 0 writes it.
    emitExpr(s.value);
    auto* work = llvm::BasicBlock::Create(ctx_, "store", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "stored", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(tid(), b_.getInt64(0)), work, done);
    b_.SetInsertPoint(work);
    storeValue(s);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    barrier();
  }

  bool splitReduction(const ExprNode&) override { return rowUniform(); }
  llvm::Value* splitBegin() override { return tid(); }
  llvm::Value* splitStep() override { return ntid(); }

  // A shared-memory array of 32 slots of 8 bytes, one per warp, reused by every
  // reduction of the kernel (a barrier ends each use).
  llvm::GlobalVariable* sharedSlots(const char* name) {
    if (auto* g = m_->getNamedGlobal(name)) return g;
    llvm::Type* t = llvm::ArrayType::get(b_.getInt64Ty(), 32);
    auto* g = new llvm::GlobalVariable(*m_, t, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(t), name,
                                       nullptr, llvm::GlobalValue::NotThreadLocal, 3);
    g->setAlignment(llvm::Align(8));
    return g;
  }

  // v from the lane whose index differs from ours in bit `offset`.
  llvm::Value* shuffleXor(llvm::Value* v, int offset) {
    llvm::Type* t = v->getType();
    llvm::Value* mask = b_.getInt32(0xffffffffu);
    auto shfl32 = [&](llvm::Value* x) {
      return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {}, {mask, x, b_.getInt32(offset), b_.getInt32(0x1f)});
    };
    if (t->isFloatTy())
      return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {}, {mask, v, b_.getInt32(offset), b_.getInt32(0x1f)});
    unsigned bits = t->getPrimitiveSizeInBits();
    if (bits == 64) {
      llvm::Value* x = b_.CreateBitCast(v, b_.getInt64Ty());
      llvm::Value* lo = shfl32(b_.CreateTrunc(x, b_.getInt32Ty()));
      llvm::Value* hi = shfl32(b_.CreateTrunc(b_.CreateLShr(x, 32), b_.getInt32Ty()));
      llvm::Value* r = b_.CreateOr(b_.CreateZExt(lo, b_.getInt64Ty()), b_.CreateShl(b_.CreateZExt(hi, b_.getInt64Ty()), 32));
      return b_.CreateBitCast(r, t);
    }
    if (bits == 32) return shfl32(v);
    return b_.CreateTrunc(shfl32(b_.CreateZExt(v, b_.getInt32Ty())), t);
  }

  // Partial results of the block's threads: combined within each warp by
  // shuffles, then across warps through shared memory; every thread gets it.
  llvm::Value* combineSplit(loop::ReduceOp op, DType vt, llvm::Value* partial) override {
    llvm::Type* t = partial->getType();
    llvm::Value* v = partial;
    for (int offset = 16; offset >= 1; offset /= 2) v = reduceCombine(op, vt, v, shuffleXor(v, offset));
    llvm::GlobalVariable* slots = sharedSlots(t->isIntegerTy(1) ? "kiln_flag_slots" : "kiln_reduce_slots");
    llvm::Type* slotsType = slots->getValueType();
    llvm::Value* t64 = tid();
    llvm::Value* lane = b_.CreateAnd(t64, b_.getInt64(31));
    llvm::Value* warp = b_.CreateLShr(t64, 5);
    llvm::Type* stored = t->isIntegerTy(1) ? b_.getInt8Ty() : t;
    auto* write = llvm::BasicBlock::Create(ctx_, "slot", fn_);
    auto* written = llvm::BasicBlock::Create(ctx_, "slotted", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(lane, b_.getInt64(0)), write, written);
    b_.SetInsertPoint(write);
    llvm::Value* toStore = t->isIntegerTy(1) ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
    b_.CreateStore(toStore, b_.CreateInBoundsGEP(slotsType, slots, {b_.getInt64(0), warp}));
    b_.CreateBr(written);
    b_.SetInsertPoint(written);
    barrier();
    llvm::Value* total = nullptr;
    for (int w = 0; w < kRowThreads / 32; ++w) {
      llvm::Value* x = b_.CreateLoad(stored, b_.CreateInBoundsGEP(slotsType, slots, {b_.getInt64(0), b_.getInt64(w)}));
      if (t->isIntegerTy(1)) x = b_.CreateICmpNE(x, b_.getInt8(0));
      total = total ? reduceCombine(op, vt, total, x) : x;
    }
    barrier();  // the slots are free for the next reduction
    return total;
  }

  bool loopHints() const override { return false; }

  // Reached only inside serial work (a parallel loop nested in a top-level if).
  void emitParallel(const loop::StmtNode& s) override {
    emitLoop(s.var, emitExpr(s.extent), LoopHint::Auto, [&] {
      for (loop::StmtId c : s.body) emitStmt(c);
    });
  }

  struct GemmValues {
    llvm::Value *m, *n, *k, *lda, *ldb, *ldc, *aOff, *bOff, *cOff;
  };
  GemmValues gemmValues(const loop::GemmArgs& g) {
    return {emitExpr(g.m), emitExpr(g.n), emitExpr(g.k), emitExpr(g.lda), emitExpr(g.ldb), emitExpr(g.ldc),
            emitExpr(g.aOffset), emitExpr(g.bOffset), emitExpr(g.cOffset)};
  }
  llvm::Value* aIndex(const loop::GemmArgs& g, const GemmValues& v, llvm::Value* i, llvm::Value* p) {
    return b_.CreateAdd(v.aOff, g.transA ? b_.CreateAdd(b_.CreateMul(p, v.lda), i) : b_.CreateAdd(b_.CreateMul(i, v.lda), p));
  }
  llvm::Value* bIndex(const loop::GemmArgs& g, const GemmValues& v, llvm::Value* p, llvm::Value* j) {
    return b_.CreateAdd(v.bOff, g.transB ? b_.CreateAdd(b_.CreateMul(j, v.ldb), p) : b_.CreateAdd(b_.CreateMul(p, v.ldb), j));
  }
  llvm::Value* bufferArg(int32_t buffer) { return fn_->getArg(static_cast<unsigned>(buffer)); }

  // Inside serial work (Single): one thread computes all of C.
  void emitConv2d(const loop::StmtNode&) override {
    throw Error("internal: conv2d statements are lowered for CPUs only");
  }

  void emitGemm(const loop::StmtNode& s) override {
    const loop::GemmArgs& g = s.gemm;
    GemmValues v = gemmValues(g);
    llvm::Type* f32 = b_.getFloatTy();
    int32_t vi = k_.numVars, vj = k_.numVars + 1, vp = k_.numVars + 2;  // private variable slots
    ensureVars(3);
    emitLoop(vi, v.m, LoopHint::Auto, [&] {
      emitLoop(vj, v.n, LoopHint::Auto, [&] {
        llvm::IRBuilder<> entryB(entry_, entry_->begin());
        llvm::AllocaInst* acc = entryB.CreateAlloca(f32);
        b_.CreateStore(llvm::ConstantFP::get(f32, 0.0), acc);
        llvm::Value* i = vars_[static_cast<size_t>(vi)];
        llvm::Value* j = vars_[static_cast<size_t>(vj)];
        emitLoop(vp, v.k, LoopHint::Auto, [&] {
          llvm::Value* p = vars_[static_cast<size_t>(vp)];
          llvm::Value* a = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, bufferArg(g.a), aIndex(g, v, i, p)));
          llvm::Value* bv = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, bufferArg(g.b), bIndex(g, v, p, j)));
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {a, bv, b_.CreateLoad(f32, acc)}), acc);
        });
        storeC(g, v, i, j, b_.CreateLoad(f32, acc));
      });
    });
  }

  void ensureVars(size_t extra) {
    size_t need = static_cast<size_t>(k_.numVars) + extra;
    if (vars_.size() < need) {
      vars_.resize(need, nullptr);
      varDepth_.resize(need, -1);
    }
  }

  void storeC(const loop::GemmArgs& g, const GemmValues& v, llvm::Value* i, llvm::Value* j, llvm::Value* acc) {
    llvm::Type* f32 = b_.getFloatTy();
    llvm::Value* cp = b_.CreateInBoundsGEP(f32, bufferArg(g.c), b_.CreateAdd(v.cOff, b_.CreateAdd(b_.CreateMul(i, v.ldc), j)));
    b_.CreateStore(g.accumulate ? b_.CreateFAdd(b_.CreateLoad(f32, cp), acc) : acc, cp);
  }

  llvm::GlobalVariable* sharedTile(const char* name, int elements) {
    if (auto* g = m_->getNamedGlobal(name)) return g;
    llvm::Type* t = llvm::ArrayType::get(b_.getFloatTy(), static_cast<uint64_t>(elements));
    auto* g = new llvm::GlobalVariable(*m_, t, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(t), name,
                                       nullptr, llvm::GlobalValue::NotThreadLocal, 3);
    g->setAlignment(llvm::Align(16));
    return g;
  }

  // C's tile (blockIdx.y, blockIdx.x): each K-slice of A and B is loaded by all
  // threads into shared memory (A's slice stored k-major, so a thread's 8 rows
  // are contiguous), then every thread accumulates its 8x8 results in
  // registers. Elements outside A, B or C are read as 0 and not written.
  void tiledGemm(const loop::GemmArgs& g) {
    GemmValues v = gemmValues(g);
    llvm::Type* f32 = b_.getFloatTy();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::GlobalVariable* as = sharedTile("kiln_tile_a", kTileK * kTileM);
    llvm::GlobalVariable* bs = sharedTile("kiln_tile_b", kTileK * kTileN);
    llvm::Value* t = tid();
    llvm::Value* tx = b_.CreateURem(t, b_.getInt64(kTileN / kThreadN));
    llvm::Value* ty = b_.CreateUDiv(t, b_.getInt64(kTileN / kThreadN));
    llvm::Value* row0 = b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y), b_.getInt64(kTileM));
    llvm::Value* col0 = b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), b_.getInt64(kTileN));
    llvm::IRBuilder<> entryB(entry_, entry_->begin());
    llvm::AllocaInst* acc = entryB.CreateAlloca(llvm::ArrayType::get(f32, kThreadM * kThreadN));
    for (int e = 0; e < kThreadM * kThreadN; ++e)
      b_.CreateStore(llvm::ConstantFP::get(f32, 0.0), b_.CreateConstInBoundsGEP2_64(acc->getAllocatedType(), acc, 0, e));

    llvm::Value* aBase = b_.CreateMul(ty, b_.getInt64(kThreadM));  // this thread's rows and columns in the tile
    llvm::Value* bBase = b_.CreateMul(tx, b_.getInt64(kThreadN));
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, "kslice", fn_);
    auto* body = llvm::BasicBlock::Create(ctx_, "kslice.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "kslice.exit", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* k0 = b_.CreatePHI(i64, 2);
    k0->addIncoming(b_.getInt64(0), pre);
    b_.CreateCondBr(b_.CreateICmpSLT(k0, v.k), body, exit);
    b_.SetInsertPoint(body);
    llvm::Value* zero = llvm::ConstantFP::get(f32, 0.0);
    // Loads: 256 threads stage kTileK x `width` elements of an operand into shared
    // memory (k-major), consecutive threads along the operand's contiguous
    // dimension (k when `kContiguous`). w is the tile's other coordinate (A's row,
    // B's column), from `origin`, within `extent`; outside, the operand's first
    // element is read (it exists: the launch has work) and 0 used.
    auto stageTile = [&](int32_t buffer, llvm::GlobalVariable* tile, int64_t width, bool kContiguous, llvm::Value* origin,
                         llvm::Value* extent, llvm::Value* firstElement, auto&& index) {
      for (int r = 0; r < kTileK * width / kGemmThreads; ++r) {
        llvm::Value* e = b_.CreateAdd(t, b_.getInt64(r * kGemmThreads));
        int64_t fast = kContiguous ? kTileK : width;
        llvm::Value* lo = b_.CreateURem(e, b_.getInt64(fast));
        llvm::Value* hi = b_.CreateUDiv(e, b_.getInt64(fast));
        llvm::Value* w = kContiguous ? hi : lo;
        llvm::Value* p = kContiguous ? lo : hi;
        llvm::Value* gw = b_.CreateAdd(origin, w);
        llvm::Value* gp = b_.CreateAdd(k0, p);
        llvm::Value* inside = b_.CreateAnd(b_.CreateICmpSLT(gw, extent), b_.CreateICmpSLT(gp, v.k));
        llvm::Value* idx = b_.CreateSelect(inside, index(gw, gp), firstElement);
        llvm::Value* x = b_.CreateSelect(inside, b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, bufferArg(buffer), idx)), zero);
        b_.CreateStore(x, b_.CreateInBoundsGEP(tile->getValueType(), tile,
                                               {b_.getInt64(0), b_.CreateAdd(b_.CreateMul(p, b_.getInt64(width)), w)}));
      }
    };
    stageTile(g.a, as, kTileM, !g.transA, row0, v.m, v.aOff, [&](llvm::Value* i, llvm::Value* p) { return aIndex(g, v, i, p); });
    stageTile(g.b, bs, kTileN, g.transB, col0, v.n, v.bOff, [&](llvm::Value* j, llvm::Value* p) { return bIndex(g, v, p, j); });
    barrier();
    for (int kk = 0; kk < kTileK; ++kk) {
      llvm::Value* a[kThreadM];
      llvm::Value* bv[kThreadN];
      for (int i = 0; i < kThreadM; ++i)
        a[i] = b_.CreateLoad(f32, b_.CreateInBoundsGEP(as->getValueType(), as,
                                                       {b_.getInt64(0), b_.CreateAdd(aBase, b_.getInt64(kk * kTileM + i))}));
      for (int j = 0; j < kThreadN; ++j)
        bv[j] = b_.CreateLoad(f32, b_.CreateInBoundsGEP(bs->getValueType(), bs,
                                                        {b_.getInt64(0), b_.CreateAdd(bBase, b_.getInt64(kk * kTileN + j))}));
      for (int i = 0; i < kThreadM; ++i)
        for (int j = 0; j < kThreadN; ++j) {
          llvm::Value* slot = b_.CreateConstInBoundsGEP2_64(acc->getAllocatedType(), acc, 0, static_cast<uint64_t>(i * kThreadN + j));
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {a[i], bv[j], b_.CreateLoad(f32, slot)}), slot);
        }
    }
    barrier();  // the slice is consumed: the next one may overwrite it
    k0->addIncoming(b_.CreateAdd(k0, b_.getInt64(kTileK)), b_.GetInsertBlock());
    b_.CreateBr(head);
    b_.SetInsertPoint(exit);
    for (int i = 0; i < kThreadM; ++i)
      for (int j = 0; j < kThreadN; ++j) {
        llvm::Value* gi = b_.CreateAdd(row0, b_.CreateAdd(aBase, b_.getInt64(i)));
        llvm::Value* gj = b_.CreateAdd(col0, b_.CreateAdd(bBase, b_.getInt64(j)));
        auto* store = llvm::BasicBlock::Create(ctx_, "c.store", fn_);
        auto* next = llvm::BasicBlock::Create(ctx_, "c.next", fn_);
        b_.CreateCondBr(b_.CreateAnd(b_.CreateICmpSLT(gi, v.m), b_.CreateICmpSLT(gj, v.n)), store, next);
        b_.SetInsertPoint(store);
        llvm::Value* slot = b_.CreateConstInBoundsGEP2_64(acc->getAllocatedType(), acc, 0, static_cast<uint64_t>(i * kThreadN + j));
        storeC(g, v, gi, gj, b_.CreateLoad(f32, slot));
        b_.CreateBr(next);
        b_.SetInsertPoint(next);
      }
  }

  // C with few rows (m <= kGpuSkinnyRows; the host picks this entry per call): a
  // warp per column j of C, grid-stride over the columns; its lanes take every
  // 32nd step of K (consecutive lanes read consecutive elements of B's column
  // when B is transposed, as a dense layer's weight is), each keeping R partial
  // sums, R the fewest of 1, 2, 4, 8, 16 that covers m (rows past m read row
  // m - 1 and are not stored); a butterfly of shuffles adds the lanes' sums.
  void skinnyGemm(const loop::GemmArgs& g) {
    GemmValues v = gemmValues(g);
    llvm::Value* t = tid();
    llvm::Value* lane = b_.CreateURem(t, b_.getInt64(32));
    llvm::Value* warps = b_.getInt64(kGpuSkinnyColumnsPerBlock);
    llvm::Value* firstColumn =
        b_.CreateAdd(b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), warps), b_.CreateUDiv(t, b_.getInt64(32)));
    llvm::Value* columnStep = b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x), warps);
    auto* done = llvm::BasicBlock::Create(ctx_, "skinny.done", fn_);
    for (int rows : {1, 2, 4, 8, 16}) {
      if (rows < kGpuSkinnyRows) {
        auto* here = llvm::BasicBlock::Create(ctx_, "skinny.rows" + std::to_string(rows), fn_);
        auto* more = llvm::BasicBlock::Create(ctx_, "skinny.more", fn_);
        b_.CreateCondBr(b_.CreateICmpSLE(v.m, b_.getInt64(rows)), here, more);
        b_.SetInsertPoint(here);
        skinnyColumns(g, v, rows, lane, firstColumn, columnStep);
        b_.CreateBr(done);
        b_.SetInsertPoint(more);
      } else {
        skinnyColumns(g, v, rows, lane, firstColumn, columnStep);
        b_.CreateBr(done);
      }
    }
    b_.SetInsertPoint(done);
  }

  void skinnyColumns(const loop::GemmArgs& g, const GemmValues& v, int rows, llvm::Value* lane, llvm::Value* firstColumn,
                     llvm::Value* columnStep) {
    llvm::Type* f32 = b_.getFloatTy();
    int32_t vj = k_.numVars, vp = k_.numVars + 1;  // private variable slots
    ensureVars(2);
    llvm::IRBuilder<> entryB(entry_, entry_->begin());
    std::vector<llvm::AllocaInst*> acc;
    for (int i = 0; i < rows; ++i) acc.push_back(entryB.CreateAlloca(f32));
    llvm::Value* lastRow = b_.CreateSub(v.m, b_.getInt64(1));
    std::vector<llvm::Value*> row;
    for (int i = 0; i < rows; ++i) row.push_back(b_.CreateSelect(b_.CreateICmpSLT(b_.getInt64(i), v.m), b_.getInt64(i), lastRow));
    emitLoop(
        vj, v.n, LoopHint::Auto,
        [&] {
          llvm::Value* j = vars_[static_cast<size_t>(vj)];
          for (llvm::AllocaInst* a : acc) b_.CreateStore(llvm::ConstantFP::get(f32, 0.0), a);
          emitLoop(
              vp, v.k, LoopHint::Auto,
              [&] {
                llvm::Value* p = vars_[static_cast<size_t>(vp)];
                llvm::Value* bv = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, bufferArg(g.b), bIndex(g, v, p, j)));
                for (int i = 0; i < rows; ++i) {
                  llvm::Value* a = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, bufferArg(g.a), aIndex(g, v, row[i], p)));
                  b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {a, bv, b_.CreateLoad(f32, acc[i])}), acc[i]);
                }
              },
              lane, b_.getInt64(32));
          llvm::Value* mask = b_.getInt32(-1);
          for (int i = 0; i < rows; ++i) {
            llvm::Value* sum = b_.CreateLoad(f32, acc[i]);
            for (int offset = 16; offset > 0; offset /= 2)
              sum = b_.CreateFAdd(sum, b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
                                                          {mask, sum, b_.getInt32(offset), b_.getInt32(0x1f)}));
            auto* store = llvm::BasicBlock::Create(ctx_, "skinny.store", fn_);
            auto* next = llvm::BasicBlock::Create(ctx_, "skinny.next", fn_);
            b_.CreateCondBr(b_.CreateAnd(b_.CreateICmpEQ(lane, b_.getInt64(0)), b_.CreateICmpSLT(b_.getInt64(i), v.m)), store,
                            next);
            b_.SetInsertPoint(store);
            storeC(g, v, b_.getInt64(i), j, sum);
            b_.CreateBr(next);
            b_.SetInsertPoint(next);
          }
        },
        firstColumn, columnStep);
  }

  // libdevice's __nv_<name> (float: __nv_<name>f).
  llvm::Value* libdevice(const std::string& name, std::initializer_list<llvm::Value*> args) {
    llvm::Type* t = (*args.begin())->getType();
    std::string fn = "__nv_" + name + (t->isFloatTy() ? "f" : "");
    std::vector<llvm::Type*> types(args.size(), t);
    llvm::FunctionCallee f = m_->getOrInsertFunction(fn, llvm::FunctionType::get(t, types, false));
    return b_.CreateCall(f, args);
  }

  llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::Value* x) override {
    switch (id) {
      case llvm::Intrinsic::exp: return libdevice("exp", {x});
      case llvm::Intrinsic::log: return libdevice("log", {x});
      case llvm::Intrinsic::sin: return libdevice("sin", {x});
      case llvm::Intrinsic::cos: return libdevice("cos", {x});
      default: return LoopEmitter::intrinsic(id, x);
    }
  }
  llvm::Value* powOf(llvm::Value* x, llvm::Value* y) override { return libdevice("pow", {x, y}); }
  llvm::Value* libmCall(const char* name, llvm::Value* x) override { return libdevice(name, {x}); }

  std::vector<int32_t> hostVars_;
  std::vector<loop::StmtId> single_stmt_;
  bool rows_ = false;    // inside a Rows launch
  int rowScope_ = -1;    // the scope of a row's body
  int rowLoops_ = 0;     // loops open around a row's body
  int sharedScope_ = -1;  // the scope of a shared-out loop's body, while one is open
};

std::unique_ptr<llvm::TargetMachine> nvptxMachine(int sm) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, err);
  if (!target) throw Error("the NVPTX backend is not available in this LLVM: " + err);
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(kTriple, "sm_" + std::to_string(sm), "",
                                                                       llvm::TargetOptions(), std::nullopt, std::nullopt,
                                                                       llvm::CodeGenOptLevel::Aggressive));
  if (!tm) throw Error("cannot create an NVPTX target machine for sm_" + std::to_string(sm));
  return tm;
}

// Links the libdevice functions the module calls, then keeps only the kernels
// external, so the optimizer drops everything else.
void linkLibdevice(llvm::Module& m) {
  bool needed = false;
  for (const llvm::Function& f : m)
    needed |= f.isDeclaration() && f.getName().starts_with("__nv_");
  if (needed) {
    std::string path = libdevicePath();
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer) throw Error("GPU math needs libdevice, but '" + path + "' cannot be read (set KILN_LIBDEVICE)");
    auto lib = llvm::parseBitcodeFile((*buffer)->getMemBufferRef(), m.getContext());
    if (!lib) {
      llvm::consumeError(lib.takeError());
      throw Error("'" + path + "' is not a libdevice bitcode file");
    }
    (*lib)->setTargetTriple(m.getTargetTriple());
    (*lib)->setDataLayout(m.getDataLayout());
    if (llvm::Linker::linkModules(m, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded))
      throw Error("cannot link libdevice into a GPU kernel");
  }
  llvm::internalizeModule(m, [](const llvm::GlobalValue& gv) {
    auto* f = llvm::dyn_cast<llvm::Function>(&gv);
    return f && f->getCallingConv() == llvm::CallingConv::PTX_Kernel;
  });
}

}  // namespace

std::string libdevicePath() {
  if (const char* p = std::getenv("KILN_LIBDEVICE"); p && *p) return p;
  return std::string(KILN_CUDA_ROOT) + "/nvvm/libdevice/libdevice.10.bc";
}

std::unique_ptr<llvm::Module> emitGpuModule(const loop::LoopKernel& k, const std::string& symbol, const PtxModule& plan,
                                            llvm::LLVMContext& ctx) {
  std::unique_ptr<llvm::Module> m = NvptxCodegen(k, ctx).run(symbol, plan);
  std::string problems;
  llvm::raw_string_ostream report(problems);
  if (llvm::verifyModule(*m, &report)) throw Error("internal: the GPU kernel " + symbol + " is invalid IR: " + problems);
  return m;
}

PtxModule emitPtx(const loop::LoopKernel& k, const std::string& symbol, int sm) {
  PtxModule out = planPtx(k, symbol);
  out.sm = std::min(sm, kMaxPtxSm);
  auto tm = nvptxMachine(out.sm);
  llvm::LLVMContext ctx;
  quietDiagnostics(ctx);
  std::unique_ptr<llvm::Module> m = emitGpuModule(k, symbol, out, ctx);
  m->setDataLayout(tm->createDataLayout());
  linkLibdevice(*m);
  optimizeModule(*m, *tm);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw Error("the NVPTX backend cannot print PTX");
  pm.run(*m);
  out.ptx = text.str().str();
  return out;
}

}  // namespace kiln::jit
