// Loads compiled CPU kernels — relocatable x86-64 ELF objects, as Kiln's code
// generator writes them — into executable memory, without LLVM.
//
// One loader for every source of machine code: a kernel compiled just now, one
// read from the disk cache, one from an executable's precompiled section. It
// accepts what the code generator emits (position-independent code in the small
// code model: PC-relative references, GOT-relative loads, PLT calls, absolute
// 64-bit words) and refuses anything else with a kiln::Error, so a damaged or
// foreign file is reported, never run half-relocated. Every offset, size, index
// and alignment read from the object is checked against the object's bounds
// before it is used.
//
// Layout: the object's code (and a jump stub per external function it calls) in
// pages mapped read+execute; its constants, data and GOT in pages after them,
// read-only once relocated (writable only if the object has writable data).
// External symbols resolve to Kiln's runtime entry points (kiln_parallel_for,
// the GEMM and convolution drivers) or, through the dynamic loader, to libc/libm.
//
// Loaded code lives as long as the process; loadKernelObject loads each symbol
// once and hands every later caller the same entry (a concurrent request waits
// for the first). Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::jit {

using KernelEntry = void (*)(void* const* buffers, const int64_t* shapes);

// The entry point `symbol` of `object`, loading it unless this process already
// has. Throws kiln::Error when the object is malformed, uses relocations the
// loader does not know, names an unknown external symbol, or lacks `symbol`.
KernelEntry loadKernelObject(std::string_view object, const std::string& symbol);

// Loads `object` afresh, outside the process-wide table (for tests and fuzzing:
// every call maps new memory, kept for the life of the process).
KernelEntry loadObjectUncached(std::string_view object, const std::string& symbol);

// The entry of `symbol` if it is loaded (waiting while another thread loads it), else null.
KernelEntry loadedKernel(const std::string& symbol);

// The object `symbol` was loaded from, if it is loaded (kept for the disk cache
// and for precompiling); the pointer stays valid for the life of the process.
const std::string* loadedKernelObject(const std::string& symbol);

// Bytes of code and data mapped by the loader so far (its statistics).
uint64_t loadedObjectBytes();

}  // namespace kiln::jit
