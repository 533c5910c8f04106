// GPU LLVM IR rewritten for the host: the emulated CUDA device's code.
#include "codegen/gpu_emulation.h"

#include <dlfcn.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/ReplaceConstant.h>
#include <llvm/IR/Verifier.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Support/SourceMgr.h>

#include <map>

#include "codegen/cpu_object.h"
#include "codegen/llvm_diagnostics.h"
#include "codegen/nvptx_codegen.h"
#include "device/emu_block.h"
#include "kiln/error.h"

namespace kiln::jit {

namespace {

using device::EmuBarrierReduce;
using device::EmuShuffle;
using device::EmuSreg;
using device::EmuVote;

// The widest access the runtime's scratch word can stand in for.
constexpr uint64_t kMaxCheckedAccess = 256;

class HostLowering {
 public:
  explicit HostLowering(llvm::Module& m) : m_(m), ctx_(m.getContext()), b_(ctx_) {
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* v = b_.getVoidTy();
    sreg_ = runtime("kiln_emu_sreg", llvm::FunctionType::get(i32, {i32}, false), true);
    barrier_ = runtime("kiln_emu_barrier", llvm::FunctionType::get(v, {i32}, false));
    barrierReduce_ = runtime("kiln_emu_barrier_reduce", llvm::FunctionType::get(i32, {i32, i32, i32}, false));
    warpSync_ = runtime("kiln_emu_warp_sync", llvm::FunctionType::get(v, {i32, i32}, false));
    shfl_ = runtime("kiln_emu_shfl", llvm::FunctionType::get(i64, {i32, i32, i32, i32, i32, i32}, false));
    vote_ = runtime("kiln_emu_vote", llvm::FunctionType::get(i32, {i32, i32, i32, i32}, false));
    shared_ = runtime("kiln_emu_shared", llvm::FunctionType::get(ptr, {i64}, false));
    access_ = runtime("kiln_emu_access", llvm::FunctionType::get(ptr, {ptr, i64, i32}, false));
  }

  void run(const std::vector<std::string>& entries, const std::string& symbol) {
    setHostTarget(m_);
    intrinsics();
    libdevice();
    sharedMemory();
    for (llvm::Function& f : m_)
      if (!f.isDeclaration()) checkAccesses(f);
    dispatcher(entries, symbol);
  }

 private:
  llvm::FunctionCallee runtime(const char* name, llvm::FunctionType* type, bool pure = false) {
    llvm::FunctionCallee c = m_.getOrInsertFunction(name, type);
    auto* f = llvm::cast<llvm::Function>(c.getCallee());
    f->addFnAttr(llvm::Attribute::NoUnwind);
    // A special register is a constant of the thread: calls may be merged.
    if (pure) {
      f->setDoesNotAccessMemory();
      f->addFnAttr(llvm::Attribute::WillReturn);
    }
    return c;
  }

  llvm::Value* site() { return b_.getInt32(nextSite_++); }

  static int sregCode(llvm::Intrinsic::ID id) {
    switch (id) {
      case llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x: return static_cast<int>(EmuSreg::TidX);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_tid_y: return static_cast<int>(EmuSreg::TidY);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_tid_z: return static_cast<int>(EmuSreg::TidZ);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x: return static_cast<int>(EmuSreg::NtidX);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_y: return static_cast<int>(EmuSreg::NtidY);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_z: return static_cast<int>(EmuSreg::NtidZ);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x: return static_cast<int>(EmuSreg::CtaidX);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y: return static_cast<int>(EmuSreg::CtaidY);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z: return static_cast<int>(EmuSreg::CtaidZ);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x: return static_cast<int>(EmuSreg::NctaidX);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y: return static_cast<int>(EmuSreg::NctaidY);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z: return static_cast<int>(EmuSreg::NctaidZ);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_laneid: return static_cast<int>(EmuSreg::LaneId);
      case llvm::Intrinsic::nvvm_read_ptx_sreg_warpsize: return static_cast<int>(EmuSreg::WarpSize);
      default: return -1;
    }
  }

  static bool shuffleOf(llvm::Intrinsic::ID id, EmuShuffle& mode, bool& isFloat, bool& withPredicate) {
    using I = llvm::Intrinsic::ID;
    struct Row {
      I id;
      EmuShuffle mode;
      bool f, p;
    };
    static const Row rows[] = {
        {llvm::Intrinsic::nvvm_shfl_sync_up_i32, EmuShuffle::Up, false, false},
        {llvm::Intrinsic::nvvm_shfl_sync_up_f32, EmuShuffle::Up, true, false},
        {llvm::Intrinsic::nvvm_shfl_sync_up_i32p, EmuShuffle::Up, false, true},
        {llvm::Intrinsic::nvvm_shfl_sync_up_f32p, EmuShuffle::Up, true, true},
        {llvm::Intrinsic::nvvm_shfl_sync_down_i32, EmuShuffle::Down, false, false},
        {llvm::Intrinsic::nvvm_shfl_sync_down_f32, EmuShuffle::Down, true, false},
        {llvm::Intrinsic::nvvm_shfl_sync_down_i32p, EmuShuffle::Down, false, true},
        {llvm::Intrinsic::nvvm_shfl_sync_down_f32p, EmuShuffle::Down, true, true},
        {llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, EmuShuffle::Bfly, false, false},
        {llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, EmuShuffle::Bfly, true, false},
        {llvm::Intrinsic::nvvm_shfl_sync_bfly_i32p, EmuShuffle::Bfly, false, true},
        {llvm::Intrinsic::nvvm_shfl_sync_bfly_f32p, EmuShuffle::Bfly, true, true},
        {llvm::Intrinsic::nvvm_shfl_sync_idx_i32, EmuShuffle::Idx, false, false},
        {llvm::Intrinsic::nvvm_shfl_sync_idx_f32, EmuShuffle::Idx, true, false},
        {llvm::Intrinsic::nvvm_shfl_sync_idx_i32p, EmuShuffle::Idx, false, true},
        {llvm::Intrinsic::nvvm_shfl_sync_idx_f32p, EmuShuffle::Idx, true, true},
    };
    for (const Row& r : rows)
      if (r.id == id) {
        mode = r.mode;
        isFloat = r.f;
        withPredicate = r.p;
        return true;
      }
    return false;
  }

  // The host value replacing one NVVM intrinsic call, or null when the call is
  // simply dropped; throws for intrinsics the emulator does not implement.
  llvm::Value* lowerIntrinsic(llvm::CallInst& call, llvm::Intrinsic::ID id, llvm::StringRef name) {
    b_.SetInsertPoint(&call);
    llvm::Type* i32 = b_.getInt32Ty();
    auto arg = [&](unsigned i) { return call.getArgOperand(i); };
    if (int code = sregCode(id); code >= 0) {
      llvm::Value* v = b_.CreateCall(sreg_, {b_.getInt32(static_cast<uint32_t>(code))});
      return b_.CreateZExtOrTrunc(v, call.getType());
    }
    EmuShuffle mode;
    bool isFloat = false, withPredicate = false;
    if (shuffleOf(id, mode, isFloat, withPredicate)) {
      llvm::Value* value = isFloat ? b_.CreateBitCast(arg(1), i32) : arg(1);
      llvm::Value* r = b_.CreateCall(shfl_, {site(), b_.getInt32(static_cast<uint32_t>(mode)), arg(0), value, arg(2), arg(3)});
      llvm::Value* lane = b_.CreateTrunc(r, i32);
      if (isFloat) lane = b_.CreateBitCast(lane, b_.getFloatTy());
      if (!withPredicate) return lane;
      llvm::Value* p = b_.CreateTrunc(b_.CreateLShr(r, 32), b_.getInt1Ty());
      llvm::Value* pair = llvm::PoisonValue::get(call.getType());
      pair = b_.CreateInsertValue(pair, lane, {0});
      return b_.CreateInsertValue(pair, p, {1});
    }
    auto vote = [&](EmuVote v) {
      llvm::Value* r = b_.CreateCall(vote_, {site(), b_.getInt32(static_cast<uint32_t>(v)), arg(0), b_.CreateZExt(arg(1), i32)});
      return v == EmuVote::Ballot ? r : b_.CreateICmpNE(r, b_.getInt32(0));
    };
    auto barrierReduce = [&](EmuBarrierReduce op) {
      return b_.CreateCall(barrierReduce_, {site(), b_.getInt32(static_cast<uint32_t>(op)), b_.CreateZExtOrTrunc(arg(0), i32)});
    };
    switch (id) {
      case llvm::Intrinsic::nvvm_barrier0:
        b_.CreateCall(barrier_, {site()});
        return nullptr;
      case llvm::Intrinsic::nvvm_barrier_sync:
      case llvm::Intrinsic::nvvm_bar_sync:
        if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(arg(0)); c && c->isZero()) {
          b_.CreateCall(barrier_, {site()});
          return nullptr;
        }
        throw Error("the CUDA emulator implements barrier 0 only, not " + name.str() + " with another barrier");
      case llvm::Intrinsic::nvvm_barrier0_popc: return barrierReduce(EmuBarrierReduce::Popc);
      case llvm::Intrinsic::nvvm_barrier0_and: return barrierReduce(EmuBarrierReduce::And);
      case llvm::Intrinsic::nvvm_barrier0_or: return barrierReduce(EmuBarrierReduce::Or);
      case llvm::Intrinsic::nvvm_bar_warp_sync:
        b_.CreateCall(warpSync_, {site(), arg(0)});
        return nullptr;
      case llvm::Intrinsic::nvvm_vote_all_sync: return vote(EmuVote::All);
      case llvm::Intrinsic::nvvm_vote_any_sync: return vote(EmuVote::Any);
      case llvm::Intrinsic::nvvm_vote_uni_sync: return vote(EmuVote::Uni);
      case llvm::Intrinsic::nvvm_vote_ballot_sync: return vote(EmuVote::Ballot);
      case llvm::Intrinsic::nvvm_membar_cta:
      case llvm::Intrinsic::nvvm_membar_gl:
      case llvm::Intrinsic::nvvm_membar_sys: return nullptr;
      default: throw Error("the CUDA emulator does not implement " + name.str());
    }
  }

  void intrinsics() {
    std::vector<llvm::Function*> declared;
    for (llvm::Function& f : m_)
      if (f.isIntrinsic() && f.getName().starts_with("llvm.nvvm.")) declared.push_back(&f);
    for (llvm::Function* f : declared) {
      std::vector<llvm::CallInst*> calls;
      for (llvm::User* u : f->users()) {
        auto* call = llvm::dyn_cast<llvm::CallInst>(u);
        if (!call || call->getCalledFunction() != f) throw Error("the CUDA emulator cannot lower a non-call use of " + f->getName().str());
        calls.push_back(call);
      }
      for (llvm::CallInst* call : calls) {
        llvm::Value* v = lowerIntrinsic(*call, f->getIntrinsicID(), f->getName());
        if (v) call->replaceAllUsesWith(v);
        call->eraseFromParent();
      }
      f->eraseFromParent();
    }
  }

  void libdevice() {
    std::vector<llvm::Function*> declared;
    for (llvm::Function& f : m_)
      if (f.isDeclaration() && f.getName().starts_with("__nv_")) declared.push_back(&f);
    for (llvm::Function* f : declared) {
      std::string host = f->getName().substr(5).str();
      // The C library's function of the same name and meaning (libdevice's are
      // named after them); one this process lacks would fail only when loaded.
      if (!::dlsym(RTLD_DEFAULT, host.c_str()))
        throw Error("the CUDA emulator has no host function for libdevice's " + f->getName().str());
      if (llvm::Function* existing = m_.getFunction(host)) {
        f->replaceAllUsesWith(existing);
        f->eraseFromParent();
      } else {
        f->setName(host);
      }
    }
  }

  // Replaces the uses of `old` (an address-space-3 pointer) in `fn` by `now`.
  void rewriteShared(llvm::Value* old, llvm::Value* now, llvm::Function& fn) {
    std::vector<llvm::User*> users(old->user_begin(), old->user_end());
    for (llvm::User* u : users) {
      auto* inst = llvm::dyn_cast<llvm::Instruction>(u);
      if (!inst) throw Error("internal: a constant use of shared memory was left for the CUDA emulator");
      if (inst->getFunction() != &fn) continue;
      if (auto* gep = llvm::dyn_cast<llvm::GetElementPtrInst>(inst)) {
        b_.SetInsertPoint(gep);
        std::vector<llvm::Value*> indices(gep->idx_begin(), gep->idx_end());
        llvm::Value* moved = b_.CreateGEP(gep->getSourceElementType(), now, indices, gep->getName(), gep->isInBounds());
        rewriteShared(gep, moved, fn);
        gep->eraseFromParent();
      } else if (auto* load = llvm::dyn_cast<llvm::LoadInst>(inst)) {
        load->setOperand(load->getPointerOperandIndex(), now);
      } else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(inst); store && store->getPointerOperand() == old) {
        store->setOperand(store->getPointerOperandIndex(), now);
      } else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(inst)) {
        rmw->setOperand(rmw->getPointerOperandIndex(), now);
      } else if (auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(inst); cas && cas->getPointerOperand() == old) {
        cas->setOperand(cas->getPointerOperandIndex(), now);
      } else if (auto* cast = llvm::dyn_cast<llvm::AddrSpaceCastInst>(inst)) {
        if (!cast->getType()->isPointerTy() || cast->getType()->getPointerAddressSpace() != 0)
          throw Error("the CUDA emulator supports casts of shared pointers to generic ones only");
        cast->replaceAllUsesWith(now);
        cast->eraseFromParent();
      } else {
        throw Error(std::string("the CUDA emulator cannot follow a shared-memory pointer through ") + inst->getOpcodeName());
      }
    }
  }

  void sharedMemory() {
    std::vector<llvm::GlobalVariable*> globals;
    for (llvm::GlobalVariable& g : m_.globals())
      if (g.getAddressSpace() == 3) globals.push_back(&g);
    if (globals.empty()) return;
    const llvm::DataLayout& dl = m_.getDataLayout();
    std::map<llvm::GlobalVariable*, uint64_t> offsets;
    uint64_t total = 0;
    for (llvm::GlobalVariable* g : globals) {
      llvm::Align align = std::max(g->getAlign().valueOrOne(), dl.getABITypeAlign(g->getValueType()));
      total = llvm::alignTo(total, align);
      offsets[g] = total;
      total += dl.getTypeAllocSize(g->getValueType());
    }
    std::vector<llvm::Constant*> constants(globals.begin(), globals.end());
    llvm::convertUsersOfConstantsToInstructions(constants);
    for (llvm::Function& fn : m_) {
      if (fn.isDeclaration()) continue;
      bool uses = false;
      for (llvm::GlobalVariable* g : globals)
        for (llvm::User* u : g->users())
          if (auto* i = llvm::dyn_cast<llvm::Instruction>(u); i && i->getFunction() == &fn) uses = true;
      if (!uses) continue;
      b_.SetInsertPoint(&*fn.getEntryBlock().getFirstInsertionPt());
      llvm::Value* base = b_.CreateCall(shared_, {b_.getInt64(total)}, "shared");
      for (llvm::GlobalVariable* g : globals) {
        b_.SetInsertPoint(llvm::cast<llvm::Instruction>(base)->getNextNode());
        llvm::Value* at = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), base, offsets[g], g->getName());
        rewriteShared(g, at, fn);
      }
    }
    for (llvm::GlobalVariable* g : globals) {
      if (!g->use_empty()) throw Error("internal: shared memory " + g->getName().str() + " is still used after its rewrite");
      g->eraseFromParent();
    }
  }

  // Whether `p` is the thread's own memory (its stack or its copy of a by-value
  // argument), which needs no check.
  static bool threadPrivate(llvm::Value* p) {
    const llvm::Value* base = llvm::getUnderlyingObject(p, 0);
    if (llvm::isa<llvm::AllocaInst>(base)) return true;
    if (auto* a = llvm::dyn_cast<llvm::Argument>(base)) return a->hasByValAttr();
    return false;
  }

  void checkAccesses(llvm::Function& fn) {
    const llvm::DataLayout& dl = m_.getDataLayout();
    std::vector<std::pair<llvm::Instruction*, unsigned>> accesses;  // instruction, pointer operand
    for (llvm::BasicBlock& bb : fn)
      for (llvm::Instruction& i : bb) {
        if (auto* load = llvm::dyn_cast<llvm::LoadInst>(&i)) accesses.emplace_back(&i, load->getPointerOperandIndex());
        else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(&i)) accesses.emplace_back(&i, store->getPointerOperandIndex());
        else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&i)) accesses.emplace_back(&i, rmw->getPointerOperandIndex());
        else if (auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&i)) accesses.emplace_back(&i, cas->getPointerOperandIndex());
        else if (llvm::isa<llvm::MemIntrinsic>(&i))
          throw Error("the CUDA emulator does not check memory intrinsics (" + fn.getName().str() + ")");
      }
    for (auto [inst, index] : accesses) {
      llvm::Value* p = inst->getOperand(index);
      if (p->getType()->getPointerAddressSpace() != 0)
        throw Error("the CUDA emulator cannot check an access in address space " +
                    std::to_string(p->getType()->getPointerAddressSpace()));
      if (threadPrivate(p)) continue;
      llvm::Type* t = nullptr;
      bool write = false;
      if (auto* load = llvm::dyn_cast<llvm::LoadInst>(inst)) t = load->getType();
      else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(inst)) t = store->getValueOperand()->getType(), write = true;
      else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(inst)) t = rmw->getValOperand()->getType(), write = true;
      else t = llvm::cast<llvm::AtomicCmpXchgInst>(inst)->getNewValOperand()->getType(), write = true;
      uint64_t bytes = dl.getTypeStoreSize(t);
      if (bytes > kMaxCheckedAccess) throw Error("the CUDA emulator cannot check an access of " + std::to_string(bytes) + " bytes");
      b_.SetInsertPoint(inst);
      uint32_t flags = nextAccess_++ << 1 | (write ? 1u : 0u);
      inst->setOperand(index, b_.CreateCall(access_, {p, b_.getInt64(bytes), b_.getInt32(flags)}));
    }
  }

  // symbol(params, which): entry *which with its parameters unpacked from
  // cuLaunchKernel's array (pointers to each argument's value; the shape array
  // by value, so its pointer is the argument).
  void dispatcher(const std::vector<std::string>& entries, const std::string& symbol) {
    llvm::Type* ptr = b_.getPtrTy();
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr}, false),
                                      llvm::Function::ExternalLinkage, symbol, m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::Value* params = fn->getArg(0);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* done = llvm::BasicBlock::Create(ctx_, "done", fn);
    b_.SetInsertPoint(entry);
    llvm::SwitchInst* sw = b_.CreateSwitch(b_.CreateLoad(b_.getInt64Ty(), fn->getArg(1)), done, static_cast<unsigned>(entries.size()));
    for (size_t e = 0; e < entries.size(); ++e) {
      llvm::Function* kernel = m_.getFunction(entries[e]);
      if (!kernel || kernel->isDeclaration()) throw Error("internal: the GPU module lacks its entry " + entries[e]);
      kernel->setCallingConv(llvm::CallingConv::C);
      kernel->setLinkage(llvm::GlobalValue::InternalLinkage);
      // Its attributes stay as the GPU code has them (noalias buffers
      // included): code that communicates between threads through a noalias
      // buffer is wrong on a GPU too, and the host's optimizer may show it.
      auto* call = llvm::BasicBlock::Create(ctx_, entries[e], fn);
      sw->addCase(b_.getInt64(e), call);
      b_.SetInsertPoint(call);
      std::vector<llvm::Value*> args;
      for (llvm::Argument& a : kernel->args()) {
        llvm::Value* slot = b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, params, a.getArgNo()));
        args.push_back(a.hasByValAttr() ? slot : b_.CreateLoad(a.getType(), slot));
      }
      llvm::CallInst* c = b_.CreateCall(kernel, args);
      c->setCallingConv(llvm::CallingConv::C);
      for (llvm::Argument& a : kernel->args())
        if (a.hasByValAttr()) c->addParamAttr(a.getArgNo(), llvm::Attribute::getWithByValType(ctx_, a.getParamByValType()));
      b_.CreateBr(done);
    }
    b_.SetInsertPoint(done);
    b_.CreateRetVoid();
  }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  llvm::FunctionCallee sreg_, barrier_, barrierReduce_, warpSync_, shfl_, vote_, shared_, access_;
  uint32_t nextSite_ = 0, nextAccess_ = 0;
};

}  // namespace

void lowerGpuModuleForHost(llvm::Module& m, const std::vector<std::string>& entries, const std::string& symbol) {
  HostLowering(m).run(entries, symbol);
}

CpuObject compileGpuIrForHost(const std::string& irText, const std::vector<std::string>& entries, const std::string& symbol) {
  llvm::LLVMContext ctx;
  quietDiagnostics(ctx);
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(irText, diag, ctx);
  if (!m) throw Error("GPU IR:" + std::to_string(diag.getLineNo()) + ":" + std::to_string(diag.getColumnNo()) + ": " +
                      diag.getMessage().str());
  std::string problems;
  llvm::raw_string_ostream report(problems);
  if (llvm::verifyModule(*m, &report)) throw Error("GPU IR is invalid: " + problems);
  lowerGpuModuleForHost(*m, entries, symbol);
  return compileToObject(*m, symbol, false);
}

EmulatedGpuObject compileGpuForHost(const loop::LoopKernel& k, const std::string& symbol, bool keepIR) {
  EmulatedGpuObject out;
  out.plan = planPtx(k, symbol);
  out.plan.sm = kMaxPtxSm;
  llvm::LLVMContext ctx;
  quietDiagnostics(ctx);
  std::unique_ptr<llvm::Module> m = emitGpuModule(k, symbol, out.plan, ctx);
  lowerGpuModuleForHost(*m, entryPoints(out.plan), symbol);
  out.object = compileToObject(*m, symbol, keepIR);
  return out;
}

}  // namespace kiln::jit
