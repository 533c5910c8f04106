// LLVM diagnostics: errors to stderr; remarks and warnings only on request.
#include "codegen/llvm_diagnostics.h"

#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdlib>
#include <cstring>

namespace kiln::jit {

namespace {

bool remarksWanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("KILN_LLVM_REMARKS");
    return v && std::strcmp(v, "1") == 0;
  }();
  return wanted;
}

void handle(const llvm::DiagnosticInfo* d, void*) {
  if (d->getSeverity() != llvm::DS_Error && !remarksWanted()) return;
  llvm::errs() << (d->getSeverity() == llvm::DS_Error ? "error: " : "llvm: ");
  llvm::DiagnosticPrinterRawOStream printer(llvm::errs());
  d->print(printer);
  llvm::errs() << "\n";
}

}  // namespace

void quietDiagnostics(llvm::LLVMContext& ctx) { ctx.setDiagnosticHandlerCallBack(handle, nullptr, true); }

}  // namespace kiln::jit
