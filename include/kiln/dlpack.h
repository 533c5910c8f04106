// DLPack: tensors in and out of Kiln without a copy.
//
// DLPack (dlpack/dlpack.h, version 0.6 here) is the exchange format of PyTorch,
// NumPy, JAX, CuPy and TVM: a DLTensor (data pointer, device, dtype, shape,
// strides) inside a DLManagedTensor whose `deleter` its consumer calls exactly
// once when done with the memory.
//
// Import (fromDLPack) takes ownership of the managed tensor when it returns: the
// Kiln tensor shares the producer's memory when that memory is what a Kiln tensor
// needs (compact row-major, 64-byte aligned, at least 64 bytes readable or empty),
// and the deleter runs when the last Kiln handle to it goes, on whichever thread
// drops it. Otherwise (strided, unaligned, small) a host tensor is copied into
// Kiln's memory and the deleter runs before fromDLPack returns; a GPU tensor that
// would need a copy is refused. When fromDLPack throws (an unsupported dtype or
// device, an overflowing shape), ownership stays with the caller.
//
// Export (toDLPack) returns a managed tensor that holds a reference to the Kiln
// tensor's memory until its deleter is called; the memory is compact row-major
// (strides null) and the DLTensor's shape array lives inside the managed tensor.
//
// Dtypes: float16/32/64, int8/16/32/64, uint8/16, and bool as DLPack's kDLBool
// code (6, 8 bits: the code DLPack 0.8 gave it). Devices: kDLCPU and kDLCUDAHost
// (pinned host memory) as the host, kDLCUDA as cuda:N.
#pragma once

#include <dlpack/dlpack.h>

#include "kiln/tensor.h"

namespace kiln {

// DLPack's code for bool (added after the 0.6 header that Debian ships).
inline constexpr uint8_t kDLBoolCode = 6;

// The DLPack dtype of a Kiln dtype, and back (throws kiln::Error for a DLPack
// dtype Kiln has no counterpart for: lanes other than 1, bfloat16, complex).
DLDataType toDLDataType(DType dtype);
DType fromDLDataType(DLDataType dtype);

Tensor fromDLPack(DLManagedTensor* managed);
// Whether fromDLPack would share the memory (true) or copy it (false); throws as
// fromDLPack does for a tensor it cannot take at all.
bool dlpackSharesMemory(const DLTensor& t);
DLManagedTensor* toDLPack(const Tensor& tensor);

}  // namespace kiln
