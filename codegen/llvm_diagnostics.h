// LLVM's diagnostics for kernels: optimization remarks and "loop not
// vectorized" warnings describe LLVM's choices, not the user's program, so they
// stay out of the terminal unless KILN_LLVM_REMARKS=1 asks for them (for
// debugging the code generator). Errors still reach stderr.
#pragma once

namespace llvm {
class LLVMContext;
}  // namespace llvm

namespace kiln::jit {

// Installs Kiln's diagnostic handler on a context made for kernels.
void quietDiagnostics(llvm::LLVMContext& ctx);

}  // namespace kiln::jit
