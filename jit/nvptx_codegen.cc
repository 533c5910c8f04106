// LoopKernel -> PTX: the grid mapping, the GPU Gemm, libdevice math, and the
// NVPTX target machine that optimizes the module and prints PTX.
#include "jit/nvptx_codegen.h"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <cstdlib>
#include <mutex>

#include "jit/cpu_jit.h"
#include "jit/loop_emitter.h"

#ifndef KILN_CUDA_ROOT
#define KILN_CUDA_ROOT "/usr/local/cuda"
#endif

namespace kiln::jit {

namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

class NvptxCodegen final : public LoopEmitter {
 public:
  using LoopEmitter::LoopEmitter;

  std::unique_ptr<llvm::Module> run(const std::string& symbol, std::vector<PtxLaunch>& launches) {
    auto m = std::make_unique<llvm::Module>(symbol, ctx_);
    m_ = m.get();
    m->setTargetTriple(kTriple);
    std::vector<loop::StmtId> top;
    if (k_.body >= 0) flatten(k_.body, top);
    for (size_t i = 0; i < top.size(); ++i) {
      const loop::StmtNode& s = k_.stmt(top[i]);
      std::string name = symbol + "_" + std::to_string(i);
      beginFunction(makeKernel(name));
      PtxLaunch::Shape shape = PtxLaunch::Shape::Grid;
      if (s.kind == StmtKind::For && loop::isParallel(s.loop)) {
        gridStride(s);
      } else if (s.kind == StmtKind::Gemm) {
        emitGemm(s);
      } else {
        // Serial work: thread 0 of a one-thread launch.
        shape = PtxLaunch::Shape::Single;
        auto* work = llvm::BasicBlock::Create(ctx_, "work", fn_);
        auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
        b_.CreateCondBr(b_.CreateICmpEQ(threadIndex(), b_.getInt64(0)), work, done);
        b_.SetInsertPoint(work);
        emitStmt(top[i]);
        b_.CreateBr(done);
        b_.SetInsertPoint(done);
      }
      b_.CreateRetVoid();
      launches.push_back({name, shape});
    }
    return m;
  }

 private:
  // Top-level statements, with blocks opened: each becomes its own launch.
  void flatten(loop::StmtId id, std::vector<loop::StmtId>& out) const {
    const loop::StmtNode& s = k_.stmt(id);
    if (s.kind != StmtKind::Block) {
      out.push_back(id);
      return;
    }
    for (loop::StmtId c : s.body) flatten(c, out);
  }

  llvm::Function* makeKernel(const std::string& name) {
    llvm::Type* ptr = b_.getPtrTy();
    std::vector<llvm::Type*> params(k_.buffers.size() + 1, ptr);
    auto* f = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                     llvm::Function::ExternalLinkage, name, m_);
    f->setCallingConv(llvm::CallingConv::PTX_Kernel);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      f->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      if (!k_.buffers[i].output) f->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
    }
    f->addParamAttr(static_cast<unsigned>(k_.buffers.size()), llvm::Attribute::ReadOnly);
    return f;
  }

  llvm::Value* sreg(llvm::Intrinsic::ID id) { return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), b_.getInt64Ty()); }
  // This thread's index in the whole launch, and the launch's thread count.
  llvm::Value* threadIndex() {
    return b_.CreateAdd(b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x)),
                        sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x));
  }
  llvm::Value* threadCount() {
    return b_.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x), sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x));
  }

  void gridStride(const loop::StmtNode& s) {
    llvm::Value* begin = threadIndex();
    llvm::Value* step = threadCount();
    emitLoop(s.var, emitExpr(s.extent), LoopHint::Auto, [&] {
      for (loop::StmtId c : s.body) emitStmt(c);
    }, begin, step);
  }

  bool loopHints() const override { return false; }

  // Reached only inside serial work (a parallel loop nested in a top-level if).
  void emitParallel(const loop::StmtNode& s) override {
    emitLoop(s.var, emitExpr(s.extent), LoopHint::Auto, [&] {
      for (loop::StmtId c : s.body) emitStmt(c);
    });
  }

  // C[i, j] (+)= sum_p A[i, p] B[p, j], one element per thread, grid-stride
  // (correct for any launch: a serial launch has one thread doing all).
  void emitGemm(const loop::StmtNode& s) override {
    const loop::GemmArgs& g = s.gemm;
    llvm::Value *m = emitExpr(g.m), *n = emitExpr(g.n), *kk = emitExpr(g.k);
    llvm::Value *lda = emitExpr(g.lda), *ldb = emitExpr(g.ldb), *ldc = emitExpr(g.ldc);
    llvm::Value *aOff = emitExpr(g.aOffset), *bOff = emitExpr(g.bOffset), *cOff = emitExpr(g.cOffset);
    llvm::Type* f32 = b_.getFloatTy();
    auto ptrOf = [&](int32_t buffer) { return fn_->getArg(static_cast<unsigned>(buffer)); };
    llvm::Value* total = b_.CreateMul(m, n);
    llvm::Value* first = threadIndex();
    llvm::Value* step = threadCount();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, "gemm.elem", fn_);
    auto* body = llvm::BasicBlock::Create(ctx_, "gemm.body", fn_);
    auto* kHead = llvm::BasicBlock::Create(ctx_, "gemm.k", fn_);
    auto* kBody = llvm::BasicBlock::Create(ctx_, "gemm.kbody", fn_);
    auto* store = llvm::BasicBlock::Create(ctx_, "gemm.store", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "gemm.exit", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* idx = b_.CreatePHI(b_.getInt64Ty(), 2);
    idx->addIncoming(first, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(idx, total), body, exit);
    b_.SetInsertPoint(body);
    llvm::Value* i = b_.CreateUDiv(idx, n);
    llvm::Value* j = b_.CreateURem(idx, n);
    b_.CreateBr(kHead);
    b_.SetInsertPoint(kHead);
    llvm::PHINode* p = b_.CreatePHI(b_.getInt64Ty(), 2);
    llvm::PHINode* acc = b_.CreatePHI(f32, 2);
    p->addIncoming(b_.getInt64(0), body);
    acc->addIncoming(llvm::ConstantFP::get(f32, 0.0), body);
    b_.CreateCondBr(b_.CreateICmpSLT(p, kk), kBody, store);
    b_.SetInsertPoint(kBody);
    llvm::Value* ai = g.transA ? b_.CreateAdd(aOff, b_.CreateAdd(b_.CreateMul(p, lda), i))
                               : b_.CreateAdd(aOff, b_.CreateAdd(b_.CreateMul(i, lda), p));
    llvm::Value* bi = g.transB ? b_.CreateAdd(bOff, b_.CreateAdd(b_.CreateMul(j, ldb), p))
                               : b_.CreateAdd(bOff, b_.CreateAdd(b_.CreateMul(p, ldb), j));
    llvm::Value* av = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, ptrOf(g.a), ai));
    llvm::Value* bv = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, ptrOf(g.b), bi));
    llvm::Value* sum = b_.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {av, bv, acc});
    p->addIncoming(b_.CreateAdd(p, b_.getInt64(1)), kBody);
    acc->addIncoming(sum, kBody);
    b_.CreateBr(kHead);
    b_.SetInsertPoint(store);
    llvm::Value* cp = b_.CreateInBoundsGEP(f32, ptrOf(g.c), b_.CreateAdd(cOff, b_.CreateAdd(b_.CreateMul(i, ldc), j)));
    llvm::Value* out = g.accumulate ? b_.CreateFAdd(b_.CreateLoad(f32, cp), acc) : static_cast<llvm::Value*>(acc);
    b_.CreateStore(out, cp);
    idx->addIncoming(b_.CreateAdd(idx, step), store);
    b_.CreateBr(head);
    b_.SetInsertPoint(exit);
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

PtxModule emitPtx(const loop::LoopKernel& k, const std::string& symbol, int sm) {
  PtxModule out;
  out.sm = std::min(sm, kMaxPtxSm);
  auto tm = nvptxMachine(out.sm);
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = NvptxCodegen(k, ctx).run(symbol, out.launches);
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
