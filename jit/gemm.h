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
//
// Products of few rows (m <= kSkinnyRows: batch-1 layers, LSTM steps, tree nodes)
// are weight-streaming problems: they take a separate path that reads each B
// panel once with vector FMAs into m x NR register accumulators, with no packing
// of A and, when B is prepacked or not transposed, none of B either.
void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
           bool transB, float* c, int64_t ldc, bool accumulate);

constexpr int64_t kSkinnyRows = 8;

// Prepacked B: all of a k x n B in the layout the GEMM reads it in (NR-wide,
// zero-padded panels for this machine's micro-kernel, one after another, each all
// k rows deep, so that streaming a panel is one sequential read), made once for
// a constant weight and then shared, read-only, by every call. The
// first kPackedHeaderFloats floats hold (k, n, NR) as int64 so that a packed
// buffer given for another shape or machine is never misread.
constexpr int64_t kPackedHeaderFloats = 16;
// Floats a packed k x n B takes, header included; -1 if that overflows.
int64_t packedBFloats(int64_t k, int64_t n);
// Packs B (k x n, or n x k stored when transB) into `out` (packedBFloats floats, 64-byte aligned).
void packGemmB(const float* b, int64_t ldb, bool transB, int64_t k, int64_t n, float* out);
// Whether `packed` was made by packGemmB for a k x n B on this machine.
bool packedBMatches(const float* packed, int64_t k, int64_t n);

// sgemm with B prepacked; `packed` null, or made for another shape, falls back to B itself.
void sgemmPacked(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool transA, const float* b, int64_t ldb,
                 bool transB, const float* packed, float* c, int64_t ldc, bool accumulate);

}  // namespace kiln::jit

// The entry point JIT kernels call; flags: bit 0 transA, bit 1 transB, bit 2 accumulate.
// The same with a prepacked B (null: none).
extern "C" void kiln_sgemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                                  const float* packed, float* c, int64_t ldc, int64_t flags);
extern "C" void kiln_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float* c, int64_t ldc, int64_t flags);
