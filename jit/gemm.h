// Single-precision matrix multiply for kernels: C = A * B (+ C), with A and B
// optionally transposed, run on the thread pool.
//
// BLIS-style: B is packed into panels NR columns wide, blocks of A into panels MR
// rows tall, and a register-blocked micro-kernel (AVX-512: 8 x 32, i.e. 16 zmm
// accumulators; AVX2: 6 x 16) computes each MR x NR tile of C over a KC slice of
// the contraction. Packing buffers are per call. Like IREE's microkernels this
// core is compiled ahead of time with a run-time choice of instruction set; the
// JIT-generated kernels call it and fuse their epilogues around it.
#pragma once

#include <cstdint>

namespace kiln::jit {

// Row-major matrices: A is m x k (or k x m when transA), with leading dimension
// lda; B is k x n (or n x k when transB); C is m x n with leading dimension ldc.
// accumulate = false overwrites C.
void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
           bool transB, float* c, int64_t ldc, bool accumulate);

}  // namespace kiln::jit

// The entry point JIT kernels call; flags: bit 0 transA, bit 1 transB, bit 2 accumulate.
extern "C" void kiln_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float* c, int64_t ldc, int64_t flags);
