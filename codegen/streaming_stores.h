// Streaming (non-temporal) vector stores for kernels whose schedule asks for them.
//
// A cached store of a line the core does not hold first reads the line from
// memory (read for ownership); for an output too large to be read back from
// cache that read is wasted traffic: a third of an element-wise a*b+c's, half
// a copy's. A non-temporal store writes the whole line without reading it.
//
// LLVM's loop vectorizer keeps the scalar store's alignment (an element's), and
// x86's non-temporal vector stores fault on an unaligned address, so the
// vectorizer refuses `!nontemporal` loops. The rewrite therefore runs on the
// optimized module, after vectorization: each vector store of 16, 32 or 64 bytes
// becomes a branch on its address's alignment, a non-temporal store where it is
// aligned (every iteration of a loop over a 64-byte aligned buffer, after at most
// one unaligned head) and the original store where it is not. The branch always
// goes the same way within a loop, so it costs a compare in a loop bound by
// memory.
//
// Only stores the code generator marked (markStreamable) are rewritten: stores
// of an output the kernel never reads back. A softmax that stores exp(x - max)
// and then divides it in place would read every line back from memory. The mark
// is an alias scope of its own domain, which no access lists as `noalias` (so it
// tells alias analysis nothing) and which the vectorizer carries from a scalar
// store to the vector stores it makes of it; a store that loses it stays cached.
//
// Non-temporal stores are weakly ordered: another thread may see them late even
// after a plain release store. Every function that makes one executes `sfence`
// before it returns, so a parallel task's stores are visible before the pool
// learns it has finished, and a kernel's before it returns to the VM.
#pragma once

namespace llvm {
class Module;
class StoreInst;
}  // namespace llvm

namespace kiln::jit {

// The module flag the CPU code generator sets when a kernel's schedule asks for
// streaming stores.
inline constexpr const char* kStreamingStoresFlag = "kiln.streaming-stores";

// Marks a store (before optimization) as one the rewrite may make non-temporal.
void markStreamable(llvm::StoreInst& store);

// Rewrites `module`'s marked vector stores as described above, if it carries
// kStreamingStoresFlag. Returns the number of stores rewritten.
int streamVectorStores(llvm::Module& module);

}  // namespace kiln::jit
