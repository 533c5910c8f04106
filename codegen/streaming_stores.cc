// Streaming vector stores: the post-vectorization rewrite of streaming_stores.h.
#include "codegen/streaming_stores.h"

#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>

namespace kiln::jit {

namespace {

// The mark: a named scope in a named domain, so uniqued (one node per context).
llvm::MDNode* streamableScope(llvm::LLVMContext& ctx) {
  llvm::MDBuilder md(ctx);
  return md.createAliasScope("kiln.streamable", md.createAliasScopeDomain("kiln.streamable"));
}

bool markedStreamable(const llvm::StoreInst& st, const llvm::MDNode* scope) {
  const llvm::MDNode* scopes = st.getMetadata(llvm::LLVMContext::MD_alias_scope);
  if (!scopes) return false;
  for (const llvm::MDOperand& op : scopes->operands())
    if (op.get() == scope) return true;
  return false;
}

// The byte size of a vector store a non-temporal instruction can make (16, 32
// or 64: movntps/movntdq of xmm, ymm, zmm), or 0.
uint64_t streamableBytes(const llvm::StoreInst& st, const llvm::DataLayout& dl, const llvm::MDNode* scope) {
  if (st.isVolatile() || st.isAtomic() || !markedStreamable(st, scope)) return 0;
  llvm::Type* t = st.getValueOperand()->getType();
  if (!llvm::isa<llvm::FixedVectorType>(t)) return 0;
  uint64_t bytes = dl.getTypeStoreSize(t).getFixedValue();
  return bytes == 16 || bytes == 32 || bytes == 64 ? bytes : 0;
}

}  // namespace

void markStreamable(llvm::StoreInst& store) {
  llvm::LLVMContext& ctx = store.getContext();
  store.setMetadata(llvm::LLVMContext::MD_alias_scope, llvm::MDNode::get(ctx, {streamableScope(ctx)}));
}

int streamVectorStores(llvm::Module& module) {
  if (!module.getModuleFlag(kStreamingStoresFlag)) return 0;
  if (!llvm::Triple(module.getTargetTriple()).isX86()) return 0;  // the knob has no instruction elsewhere
  const llvm::DataLayout& dl = module.getDataLayout();
  llvm::LLVMContext& ctx = module.getContext();
  const llvm::MDNode* scope = streamableScope(ctx);
  llvm::MDNode* nontemporal =
      llvm::MDNode::get(ctx, llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), 1)));
  llvm::Function* sfence = llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::x86_sse_sfence);
  int rewritten = 0;
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    std::vector<std::pair<llvm::StoreInst*, uint64_t>> stores;
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& i : bb)
        if (auto* st = llvm::dyn_cast<llvm::StoreInst>(&i))
          if (uint64_t bytes = streamableBytes(*st, dl, scope)) stores.emplace_back(st, bytes);
    if (stores.empty()) continue;
    for (auto [st, bytes] : stores) {
      llvm::IRBuilder<> b(st);
      llvm::Value* address = b.CreatePtrToInt(st->getPointerOperand(), b.getInt64Ty());
      llvm::Value* aligned = b.CreateICmpEQ(b.CreateAnd(address, b.getInt64(bytes - 1)), b.getInt64(0));
      llvm::Instruction* thenTerm = nullptr;
      llvm::Instruction* elseTerm = nullptr;
      llvm::SplitBlockAndInsertIfThenElse(aligned, st, &thenTerm, &elseTerm);
      auto* streaming = llvm::cast<llvm::StoreInst>(st->clone());
      streaming->setAlignment(llvm::Align(bytes));
      streaming->setMetadata(llvm::LLVMContext::MD_nontemporal, nontemporal);
      streaming->insertBefore(thenTerm);
      st->moveBefore(elseTerm);
      ++rewritten;
    }
    std::vector<llvm::ReturnInst*> returns;
    for (llvm::BasicBlock& bb : f)
      if (auto* ret = llvm::dyn_cast<llvm::ReturnInst>(bb.getTerminator())) returns.push_back(ret);
    for (llvm::ReturnInst* ret : returns) llvm::CallInst::Create(sfence, {}, "", ret);
  }
  return rewritten;
}

}  // namespace kiln::jit
