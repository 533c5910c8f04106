// The host CPU's identity for kernel keys, read with cpuid (no LLVM).
//
// A compiled CPU kernel is valid only on a CPU whose model and instruction-set
// features are those it was compiled for (LLVM tunes for the model and uses every
// feature it finds). The fingerprint names both — vendor, family/model/stepping,
// the feature words of cpuid leaves 1, 7 and 0x80000001, and the register state
// the OS enables (XCR0) — so a kernel key made on one machine never matches on
// another whose code generator would choose differently.
#pragma once

#include <string>

namespace kiln::jit {

// e.g. "x86_64|AuthenticAMD|f25m97s2|<hex words>|xcr0=e7"; computed once.
const std::string& hostCpuFingerprint();

// Whether the host CPU is Intel's (cpuid vendor "GenuineIntel"): for the kernel
// choices that were measured to go opposite ways on Intel and AMD cores (see
// jit/gemm_skinny.cc's farStream). Computed once.
bool hostCpuIsIntel();

// The cpuid family of an AMD host CPU (0x19: Zen 3 and 4, 0x1a: Zen 5), or 0
// on any other vendor: for the choices measured on one AMD generation only (see
// jit/gemm_skinny.cc's fourPanelPrefetch). Computed once.
unsigned hostCpuAmdFamily();

}  // namespace kiln::jit
