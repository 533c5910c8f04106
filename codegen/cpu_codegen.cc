// LoopKernel -> LLVM IR for the host CPU: the entry point, parallel loops as
// thread-pool tasks, Gemm as calls of the sgemm microkernel, libm for float64 math
// (the rest is LoopEmitter's).
#include "codegen/cpu_codegen.h"

#include <unordered_map>

#include <llvm/ADT/StringMap.h>
#include <llvm/TargetParser/Host.h>

#include "codegen/loop_emitter.h"
#include "codegen/streaming_stores.h"
#include "device/thread_pool.h"
#include "jit/conv2d.h"
#include "jit/gemm.h"
#include "kernel_ir/gemm_epilogue.h"

namespace kiln::jit {


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

// The buffers the streaming-stores schedule may write around the caches: those
// element stores write and nothing in the kernel reads (no load of them, no
// GEMM or convolution on them), so no line written is wanted back here.
std::vector<bool> outputsNeverRead(const loop::LoopKernel& k) {
  std::vector<bool> stored(k.buffers.size()), read(k.buffers.size());
  auto mark = [&](int32_t b) {
    if (b >= 0 && static_cast<size_t>(b) < read.size()) read[static_cast<size_t>(b)] = true;
  };
  for (const loop::ExprNode& e : k.exprs)
    if (e.kind == loop::ExprKind::Load) mark(static_cast<int32_t>(e.a));
  for (const loop::StmtNode& s : k.stmts) {
    if (s.kind == loop::StmtKind::Store && s.buffer >= 0) stored[static_cast<size_t>(s.buffer)] = true;
    if (s.kind == loop::StmtKind::Gemm)
      for (int32_t b : {s.gemm.a, s.gemm.b, s.gemm.c}) mark(b);
    if (s.kind == loop::StmtKind::Conv2d)
      for (int32_t b : {s.conv.x, s.conv.w, s.conv.out, s.conv.packedW, s.conv.bias, s.conv.next.w,
                        s.conv.next.packedW, s.conv.next.bias, s.conv.next.between})
        mark(b);
  }
  std::vector<bool> out(k.buffers.size());
  for (size_t b = 0; b < out.size(); ++b) out[b] = stored[b] && !read[b];
  return out;
}

class CpuCodegen final : public LoopEmitter {
 public:
  CpuCodegen(const loop::LoopKernel& k, llvm::LLVMContext& ctx, const CpuTarget& target)
      : LoopEmitter(k, ctx), target_(target) {}

  std::unique_ptr<llvm::Module> run(const std::string& symbol) {
    auto m = std::make_unique<llvm::Module>(symbol, ctx_);
    m_ = m.get();
    m->setTargetTriple(target_.triple);
    if (k_.schedule.streamingStores) {
      m->addModuleFlag(llvm::Module::Error, kStreamingStoresFlag, 1);
      streamable_ = outputsNeverRead(k_);
    }
    llvm::Type* ptr = b_.getPtrTy();

    symbol_ = symbol;
    beginFunction(makeBodyFunction(symbol + ".body", false));
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
    args.push_back(entry->getArg(0));
    b_.CreateCall(fn_, args);
    b_.CreateRetVoid();
    return m;
  }

 private:
  // Body functions take the buffers as noalias pointers (so loops vectorize without
  // alias checks), then the shape array, then the original buffer array (passed on
  // to parallel tasks); ranged ones (task bodies) also take [begin, end).
  llvm::Function* makeBodyFunction(const std::string& name, bool ranged) {
    llvm::Type* ptr = b_.getPtrTy();
    std::vector<llvm::Type*> params(k_.buffers.size(), ptr);
    params.push_back(ptr);
    params.push_back(ptr);
    if (ranged) {
      params.push_back(b_.getInt64Ty());
      params.push_back(b_.getInt64Ty());
    }
    auto* ty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    auto* f = llvm::Function::Create(ty, llvm::Function::InternalLinkage, name, m_);
    setAttributes(f);
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      f->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      f->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoCapture);
      if (!k_.buffers[i].output) f->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
    }
    f->addParamAttr(static_cast<unsigned>(k_.buffers.size()), llvm::Attribute::ReadOnly);
    f->addParamAttr(static_cast<unsigned>(k_.buffers.size()), llvm::Attribute::NoAlias);
    if (ranged) f->addFnAttr(llvm::Attribute::AlwaysInline);
    return f;
  }

  // A parallel loop outside any task body goes to the pool, also inside serial
  // loops (a convolution's unfold, per image): the task then captures the
  // enclosing loops' variables (below).
  bool parallelHere() const override { return !inTask_; }

  // A parallel loop becomes a task function over [begin, end), run by
  // kiln_parallel_for on the thread pool (makeLoopTask).
  void emitParallel(const loop::StmtNode& s) override {
    llvm::Value* extent = emitExpr(s.extent);
    llvm::Value* work = loopWork(s, extent);
    // Work known now and below the pool's threshold: the loop would always run
    // inline, so it is emitted inline, and with a static trip count the
    // vectorized loop needs no remainder (half the code of a small element-wise
    // kernel, which compiles in half the time). So is every loop of a schedule
    // that shares nothing.
    if (!k_.schedule.parallel) {
      emitInnerFor(s, loop::isVectorized(s.loop) ? LoopHint::Vectorize : LoopHint::NoVectorize);
      return;
    }
    if (auto* known = llvm::dyn_cast<llvm::ConstantInt>(work); known && known->getSExtValue() < device::kMinParallelWork) {
      emitInnerFor(s, loop::isVectorized(s.loop) ? LoopHint::Vectorize : LoopHint::NoVectorize);
      return;
    }
    LoopTask t = makeLoopTask(s);
    llvm::Type* ptr = b_.getPtrTy();
    llvm::FunctionCallee pfor = m_->getOrInsertFunction(
        "kiln_parallel_for", llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt64Ty(), b_.getInt64Ty(), ptr, ptr, ptr}, false));
    b_.CreateCall(pfor, {extent, work, t.task, fn_->getArg(static_cast<unsigned>(k_.buffers.size()) + 1), t.shapes});
  }

  // A loop's estimate of its work for the pool. The schedule's grain scales the
  // work the pool compares with its threshold (a grain shift of g: only loops of
  // kMinParallelWork << g elements share).
  llvm::Value* loopWork(const loop::StmtNode& s, llvm::Value* extent) {
    llvm::Value* work = b_.CreateMul(extent, bodyWork(s.body));
    const loop::Schedule& sched = k_.schedule;
    if (sched.grainShift > 0) work = b_.CreateAShr(work, b_.getInt64(sched.grainShift));
    if (sched.grainShift < 0) work = b_.CreateShl(work, b_.getInt64(-sched.grainShift));
    return work;
  }

  // Loop `s` as a task function over [begin, end) of its variable, for the pool
  // (kiln_parallel_for) or a product's threads (kiln_sgemm_packed_then), and the
  // shape array to pass it. Variables of enclosing loops travel in the shape
  // array: the task gets a copy with their values appended, at numShapeSlots + i,
  // and binds them at its entry.
  struct LoopTask {
    llvm::Function* task;
    llvm::Value* shapes;
  };
  LoopTask makeLoopTask(const loop::StmtNode& s) {
    llvm::Type* ptr = b_.getPtrTy();
    std::string base = symbol_ + ".task" + std::to_string(tasks_++);
    llvm::Function* inner = makeBodyFunction(base + ".body", true);
    auto* taskTy = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, b_.getInt64Ty(), b_.getInt64Ty()}, false);
    auto* task = llvm::Function::Create(taskTy, llvm::Function::InternalLinkage, base, m_);
    setAttributes(task);
    {
      llvm::IRBuilder<> tb(llvm::BasicBlock::Create(ctx_, "entry", task));
      std::vector<llvm::Value*> args;
      for (size_t i = 0; i < k_.buffers.size(); ++i)
        args.push_back(tb.CreateLoad(ptr, tb.CreateConstInBoundsGEP1_64(ptr, task->getArg(0), i)));
      args.push_back(task->getArg(1));
      args.push_back(task->getArg(0));
      args.push_back(task->getArg(2));
      args.push_back(task->getArg(3));
      tb.CreateCall(inner, args);
      tb.CreateRetVoid();
    }
    unsigned n = static_cast<unsigned>(k_.buffers.size());
    llvm::Value* shapes = fn_->getArg(n);
    std::vector<int32_t> captured;
    for (size_t v = 0; v < vars_.size(); ++v)
      if (vars_[v]) captured.push_back(static_cast<int32_t>(v));
    if (!captured.empty()) {
      size_t slots = static_cast<size_t>(k_.numShapeSlots);
      llvm::IRBuilder<> eb(entry_, entry_->begin());  // one stack slot per function, not per trip
      llvm::Value* copy = eb.CreateAlloca(b_.getInt64Ty(), b_.getInt64(static_cast<int64_t>(slots + captured.size())));
      if (slots) b_.CreateMemCpy(copy, llvm::MaybeAlign(8), shapes, llvm::MaybeAlign(8), slots * sizeof(int64_t));
      for (size_t i = 0; i < captured.size(); ++i)
        b_.CreateStore(vars_[static_cast<size_t>(captured[i])], b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), copy, slots + i));
      shapes = copy;
    }

    // The loop itself, emitted into the task body with fresh per-function state.
    llvm::Function* savedFn = fn_;
    llvm::BasicBlock* savedEntry = entry_;
    std::vector<llvm::Value*> savedCache(k_.exprs.size(), nullptr);
    savedCache.swap(cache_);
    std::vector<std::vector<ExprId>> savedScopes(1);
    savedScopes.swap(scopes_);
    std::vector<llvm::BasicBlock*> savedPreheaders;
    savedPreheaders.swap(preheaders_);
    std::vector<llvm::Value*> savedVars = vars_;
    std::vector<int> savedDepth = varDepth_;
    inTask_ = true;
    {
      llvm::IRBuilderBase::InsertPointGuard guard(b_);
      fn_ = inner;
      entry_ = llvm::BasicBlock::Create(ctx_, "entry", inner);
      b_.SetInsertPoint(entry_);
      std::fill(vars_.begin(), vars_.end(), nullptr);
      std::fill(varDepth_.begin(), varDepth_.end(), -1);
      for (size_t i = 0; i < captured.size(); ++i) {
        size_t v = static_cast<size_t>(captured[i]);
        vars_[v] = b_.CreateLoad(b_.getInt64Ty(),
                                 b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), inner->getArg(n), static_cast<uint64_t>(k_.numShapeSlots) + i));
        varDepth_[v] = 0;
      }
      LoopHint hint = loop::isVectorized(s.loop) ? LoopHint::Vectorize : LoopHint::Auto;
      emitLoop(s.var, inner->getArg(n + 3), hint, [&] {
        for (loop::StmtId c : s.body) emitStmt(c);
      }, inner->getArg(n + 2));
      b_.CreateRetVoid();
    }
    inTask_ = false;
    fn_ = savedFn;
    entry_ = savedEntry;
    cache_.swap(savedCache);
    scopes_.swap(savedScopes);
    preheaders_.swap(savedPreheaders);
    vars_ = std::move(savedVars);
    varDepth_ = std::move(savedDepth);
    return {task, shapes};
  }

  // A loop with a prefetch hint is strip-mined: each chunk first asks for the
  // cache lines of the same chunk of the prefetch stream, then runs the loop over
  // the chunk (still vectorized). A prefetch is one instruction per line that
  // never faults, so the stream may run past its buffer's end (the last row's
  // "next row"). Chunks keep the requests spread over the loop instead of in one
  // burst that would fill the miss queue ahead of the loop's own loads.
  void emitInnerFor(const loop::StmtNode& s, LoopHint hint) override {
    size_t chunkVar = static_cast<size_t>(k_.numVars);  // codegen's own loop variable
    if (vars_.size() <= chunkVar) vars_.resize(chunkVar + 1, nullptr), varDepth_.resize(chunkVar + 1, -1);
    if (s.prefetchBuffer < 0 || varDepth_[chunkVar] >= 0) return LoopEmitter::emitInnerFor(s, hint);
    const loop::BufferDecl& buf = k_.buffers[static_cast<size_t>(s.prefetchBuffer)];
    llvm::Type* elem = memoryType(buf.dtype);
    int64_t elemBytes = static_cast<int64_t>(m_->getDataLayout().getTypeAllocSize(elem));
    int64_t lineElems = std::max<int64_t>(1, kCacheLineBytes / elemBytes);
    int64_t chunk = lineElems * kPrefetchLinesPerChunk;
    llvm::Value* extent = emitExpr(s.extent);
    llvm::Function* prefetch = llvm::Intrinsic::getDeclaration(m_, llvm::Intrinsic::prefetch, {b_.getPtrTy()});
    emitLoop(static_cast<int32_t>(chunkVar), extent, LoopHint::NoVectorize, [&] {
      llvm::Value* start = vars_[chunkVar];
      llvm::Value* first = b_.CreateAdd(emitExpr(s.prefetchOffset), start);
      llvm::Value* base = fn_->getArg(static_cast<unsigned>(s.prefetchBuffer));
      for (int64_t line = 0; line < kPrefetchLinesPerChunk; ++line) {
        llvm::Value* p = b_.CreateGEP(elem, base, b_.CreateAdd(first, b_.getInt64(line * lineElems)));
        // read, locality 2 (keep in L2: the next pass is a while away), data cache
        b_.CreateCall(prefetch, {p, b_.getInt32(0), b_.getInt32(2), b_.getInt32(1)});
      }
      llvm::Value* end = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(start, b_.getInt64(chunk)), extent);
      emitLoop(s.var, end, hint, [&] {
        for (loop::StmtId c : s.body) emitStmt(c);
      }, start);
    }, nullptr, b_.getInt64(chunk));
  }
  static constexpr int64_t kCacheLineBytes = 64;
  static constexpr int64_t kPrefetchLinesPerChunk = 16;

  // Elements touched by one iteration of a loop whose body is `body`: nested
  // loops multiply, statements side by side add; an extent that depends on a loop
  // variable counts as 1. Only decides whether a loop is worth the thread pool.
  llvm::Value* bodyWork(const std::vector<loop::StmtId>& body) {
    llvm::Value* total = b_.getInt64(0);
    for (loop::StmtId id : body) {
      const loop::StmtNode& t = k_.stmt(id);
      llvm::Value* w = b_.getInt64(1);
      if (t.kind == StmtKind::Store) {
        std::unordered_map<ExprId, llvm::Value*> memo;
        w = b_.CreateAdd(w, exprWork(t.value, memo));
      } else if (t.kind == StmtKind::For) {
        llvm::Value* inner = bodyWork(t.body);
        w = closedExpr(t.extent) ? b_.CreateMul(emitExpr(t.extent), inner) : inner;
      } else if (t.kind == StmtKind::Block || t.kind == StmtKind::If) {
        w = bodyWork(t.body);
      } else if (t.kind == StmtKind::Gemm || t.kind == StmtKind::Conv2d) {
        w = b_.getInt64(int64_t(1) << 20);
      }
      total = b_.CreateAdd(total, w);
    }
    return total;
  }

  // The reduction iterations an expression performs: each reduction's closed
  // extents times (1 + its body's own), so a kernel of row reductions is not
  // mistaken for a small one. Extents that depend on loop variables count as 1
  // (a lower bound). Memoized: expressions are a DAG with shared nodes.
  llvm::Value* exprWork(ExprId id, std::unordered_map<ExprId, llvm::Value*>& memo) {
    if (auto it = memo.find(id); it != memo.end()) return it->second;
    const ExprNode& n = k_.expr(id);
    llvm::Value* w = b_.getInt64(0);
    auto add = [&](ExprId child) { w = b_.CreateAdd(w, exprWork(child, memo)); };
    switch (n.kind) {
      case ExprKind::Reduce:
        w = b_.CreateAdd(b_.getInt64(1), exprWork(n.a, memo));
        for (int64_t i = 0; i < n.ival; ++i) {
          ExprId extent = k_.reduceExtents[static_cast<size_t>(n.c + i)];
          if (closedExpr(extent)) w = b_.CreateMul(emitExpr(extent), w);
        }
        break;
      case ExprKind::Unary:
      case ExprKind::Cast: add(n.a); break;
      case ExprKind::Load: add(n.b); break;
      case ExprKind::Binary: add(n.a), add(n.b); break;
      case ExprKind::Select: add(n.a), add(n.b), add(n.c); break;
      default: break;
    }
    memo.emplace(id, w);
    return w;
  }

  // Whether an expression reads no loop variable and no memory (a shape product).
  bool closedExpr(ExprId id) const {
    const ExprNode& n = k_.expr(id);
    switch (n.kind) {
      case ExprKind::IntConst:
      case ExprKind::Dim: return true;
      case ExprKind::Binary: return closedExpr(n.a) && closedExpr(n.b);
      default: return false;
    }
  }

  void setAttributes(llvm::Function* f) {
    f->addFnAttr(llvm::Attribute::NoUnwind);
    f->addFnAttr("target-cpu", target_.cpu);
    f->addFnAttr("target-features", target_.features);
    f->addFnAttr("prefer-vector-width", "512");
  }

  // A float pointer into buffer `buffer`, `offset` elements in.
  llvm::Value* at(int32_t buffer, ExprId offset) {
    return b_.CreateInBoundsGEP(b_.getFloatTy(), fn_->getArg(static_cast<unsigned>(buffer)), emitExpr(offset));
  }

  // The entry points' flags (jit/gemm.h) for product `g` under this schedule.
  int64_t gemmFlags(const loop::GemmArgs& g) const {
    return (g.transA ? 1 : 0) | (g.transB ? 2 : 0) | (g.accumulate ? 4 : 0) |
           (k_.schedule.parallel ? 0 : jit::kGemmFlagSerial) | device::grainFlags(k_.schedule.grainShift) |
           jit::gemmBlockingFlags({k_.schedule.gemmKC, k_.schedule.gemmMCTiles, k_.schedule.gemmTile,
                                   k_.schedule.gemmPackA, k_.schedule.gemmNarrow});
  }

  // A product and the loop after it that reads it by column groups: one call,
  // the loop a task the product's threads run on their own columns
  // (jit::GemmEpilogue). Not inside a task (nothing there is shared out), nor
  // under a schedule that shares nothing (the two would then be one thread's
  // anyway, in the same order) or that asks for the loop after the product
  // (then=after).
  bool emitGemmThen(const loop::StmtNode& gemm, const loop::StmtNode& next) override {
    if (!parallelHere() || !k_.schedule.parallel || !k_.schedule.gemmThenInThreads) return false;
    std::optional<int64_t> groups = loop::epilogueColumnGroups(k_, gemm, next);
    if (!groups) return false;
    const loop::GemmArgs& g = gemm.gemm;
    llvm::Value* work = loopWork(next, emitExpr(next.extent));
    LoopTask t = makeLoopTask(next);
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::FunctionCallee then = m_->getOrInsertFunction(
        "kiln_sgemm_packed_then",
        llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, i64, ptr, i64, ptr, i64, ptr, ptr, i64, i64, i64, ptr, ptr, ptr, i64},
                                false));
    std::vector<llvm::Value*> args = packedGemmArgs(g, gemmFlags(g));
    args.insert(args.end(), {b_.getInt64(*groups), t.task, fn_->getArg(static_cast<unsigned>(k_.buffers.size()) + 1),
                             t.shapes, work});
    b_.CreateCall(then, args);
    return true;
  }

  // kiln_sgemm_packed's arguments for product `g` (m, n, k, A, lda, B, ldb, its
  // packed form, C, ldc, flags): the prefix kiln_sgemm_packed_then's share.
  std::vector<llvm::Value*> packedGemmArgs(const loop::GemmArgs& g, int64_t flags) {
    return {emitExpr(g.m), emitExpr(g.n), emitExpr(g.k), at(g.a, g.aOffset), emitExpr(g.lda), at(g.b, g.bOffset),
            emitExpr(g.ldb), fn_->getArg(static_cast<unsigned>(g.packedB)), at(g.c, g.cOffset), emitExpr(g.ldc),
            b_.getInt64(flags)};
  }

  void emitGemm(const loop::StmtNode& s) override {
    const loop::GemmArgs& g = s.gemm;
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::FunctionCallee sgemm = m_->getOrInsertFunction(
        "kiln_sgemm", llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, i64, ptr, i64, ptr, i64, ptr, i64, i64}, false));
    int64_t flags = gemmFlags(g);
    if (g.bias >= 0 || g.relu) {
      // The product finishes C itself: bias per column, then ReLU (jit::GemmPost).
      llvm::FunctionCallee post = m_->getOrInsertFunction(
          "kiln_sgemm_post",
          llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, i64, ptr, i64, ptr, i64, ptr, ptr, i64, i64, ptr}, false));
      llvm::Value* packed = g.packedB >= 0 ? static_cast<llvm::Value*>(fn_->getArg(static_cast<unsigned>(g.packedB)))
                                           : llvm::ConstantPointerNull::get(b_.getPtrTy());
      llvm::Value* bias = g.bias >= 0 ? static_cast<llvm::Value*>(fn_->getArg(static_cast<unsigned>(g.bias)))
                                      : llvm::ConstantPointerNull::get(b_.getPtrTy());
      b_.CreateCall(post, {emitExpr(g.m), emitExpr(g.n), emitExpr(g.k), at(g.a, g.aOffset), emitExpr(g.lda), at(g.b, g.bOffset),
                           emitExpr(g.ldb), packed, at(g.c, g.cOffset), emitExpr(g.ldc), b_.getInt64(flags | (g.relu ? 8 : 0)),
                           bias});
      return;
    }
    if (g.packedB >= 0) {
      llvm::FunctionCallee packed = m_->getOrInsertFunction(
          "kiln_sgemm_packed",
          llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, i64, ptr, i64, ptr, i64, ptr, ptr, i64, i64}, false));
      b_.CreateCall(packed, packedGemmArgs(g, flags));
      return;
    }
    b_.CreateCall(sgemm, {emitExpr(g.m), emitExpr(g.n), emitExpr(g.k), at(g.a, g.aOffset), emitExpr(g.lda),
                          at(g.b, g.bOffset), emitExpr(g.ldb), at(g.c, g.cOffset), emitExpr(g.ldc), b_.getInt64(flags)});
  }

  // One convolution's call of the runtime (kiln_sconv2d), or a chained pair's
  // (kiln_sconv2d_pair: both convolutions' dims in one array, the first's first).
  void emitConv2d(const loop::StmtNode& s) override {
    const loop::Conv2dArgs& c = s.conv;
    bool pair = c.next.w >= 0;
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::IRBuilder<> entryB(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* dims = entryB.CreateAlloca(llvm::ArrayType::get(i64, pair ? 32 : 16));
    auto store = [&](const std::array<loop::ExprId, 16>& values, size_t at) {
      for (size_t i = 0; i < values.size(); ++i)
        b_.CreateStore(emitExpr(values[i]), b_.CreateConstInBoundsGEP2_64(dims->getAllocatedType(), dims, 0, at + i));
    };
    store(c.dims, 0);
    auto buffer = [&](int32_t b) { return fn_->getArg(static_cast<unsigned>(b)); };
    auto orNull = [&](int32_t b) {
      return b >= 0 ? static_cast<llvm::Value*>(buffer(b)) : llvm::ConstantPointerNull::get(b_.getPtrTy());
    };
    const int32_t tiles = k_.schedule.convWinograd;  // 0, 2 or 4 (loop::Schedule)
    auto minimal = tiles == 0   ? jit::MinimalFiltering::Off
                   : tiles == 4 ? jit::MinimalFiltering::Tiles4x4
                                : jit::MinimalFiltering::Tiles2x2;
    int64_t flags = (c.relu ? 1 : 0) | (k_.schedule.parallel ? 0 : 2) | jit::minimalFilteringFlags(minimal) |
                    device::grainFlags(k_.schedule.grainShift);
    if (!pair) {
      llvm::FunctionCallee conv = m_->getOrInsertFunction(
          "kiln_sconv2d", llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr, ptr, ptr, i64}, false));
      b_.CreateCall(conv, {dims, buffer(c.x), buffer(c.w), orNull(c.packedW), buffer(c.out), orNull(c.bias),
                           b_.getInt64(flags)});
      return;
    }
    store(c.next.dims, 16);
    llvm::FunctionCallee conv = m_->getOrInsertFunction(
        "kiln_sconv2d_pair",
        llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64}, false));
    b_.CreateCall(conv, {dims, buffer(c.x), buffer(c.w), orNull(c.packedW), orNull(c.bias), buffer(c.next.w),
                         orNull(c.next.packedW), orNull(c.next.bias), buffer(c.next.between), buffer(c.out),
                         b_.getInt64(flags | (c.next.relu ? 4 : 0))});
  }

  llvm::Value* libmCall(const char* name, llvm::Value* x) override {
    llvm::Type* t = x->getType();
    llvm::FunctionCallee f = m_->getOrInsertFunction(name, llvm::FunctionType::get(t, {t}, false));
    return b_.CreateCall(f, {x});
  }

  void emitStore(const loop::StmtNode& s) override {
    llvm::StoreInst* st = storeValue(s);
    if (static_cast<size_t>(s.buffer) < streamable_.size() && streamable_[static_cast<size_t>(s.buffer)])
      markStreamable(*st);
  }

  const CpuTarget& target_;
  std::vector<bool> streamable_;  // per buffer, when the schedule streams stores (outputsNeverRead)
  std::string symbol_;
  int tasks_ = 0;
  bool inTask_ = false;  // emitting a task body: loops inside run serially
};

}  // namespace

std::unique_ptr<llvm::Module> emitCpuModule(const loop::LoopKernel& k, llvm::LLVMContext& ctx,
                                            const std::string& symbol, const CpuTarget& target) {
  return CpuCodegen(k, ctx, target).run(symbol);
}

}  // namespace kiln::jit
