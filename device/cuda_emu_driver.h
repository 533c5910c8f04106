// The emulated CUDA device's driver: the same table of entry points as the real
// driver (cuda_driver.h), implemented on the host, so that everything above it —
// placement, streams, pools, copies, events, kernels and their launch plans —
// runs as it does on a GPU. Selected by the device kind (`cuda-emu`), never in
// place of a missing GPU: `cuda` always means the real driver.
//
// Representation: device memory is host memory from the C library (256-byte
// aligned like cuMemAlloc's, filled with 0xff bytes so a kernel that reads what
// nothing wrote sees NaNs), registered by address with its size and the bytes
// its holder may read and write; a process-wide budget per device
// ($KILN_CUDA_EMU_MEMORY bytes, default a quarter of physical memory, at most
// 4 GiB) makes cuMemAlloc fail like a full GPU. Streams run their work when it is
// queued (in order, so every stream's order holds); events read the host clock.
// A module is not PTX but an EmulatedModuleImage: the host object's dispatcher,
// compiled by the code generator from the same GPU LLVM IR that NVPTX gets
// (codegen/gpu_emulation.cc). cuLaunchKernel runs the grid (emu_block.h) and
// returns CUDA_ERROR_ILLEGAL_ADDRESS or CUDA_ERROR_LAUNCH_FAILED with a report
// that cuGetErrorString gives back on the same thread.
//
// Thread-safety: as the real driver: any thread; launches run on the calling thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/cuda_driver.h"

namespace kiln::device {

// How many emulated GPUs there are (cuda-emu:0 and cuda-emu:1).
constexpr int kEmulatedGpus = 2;

// What cuModuleLoadDataEx takes on the emulated device instead of PTX.
struct EmulatedModuleImage {
  static constexpr uint64_t kMagic = 0x31554d454e4c494bull;  // "KILNEMU1"
  uint64_t magic = kMagic;
  void (*dispatch)(void* const* params, const int64_t* which) = nullptr;
  std::vector<std::string> entries;  // the launch index of each entry name
  std::string kernel;                // the fused function's name, for reports
};

#if KILN_HAVE_CUDA_H
const CudaDriver& emulatedCudaDriver();
#endif

// Kernels and copies may read the first `readable` bytes of the emulated
// allocation at `p` and write its first `writable` (0, 0: the block is free).
// Pools call it as they hand blocks out and take them back; a raw cuMemAlloc
// block is whole for both. No effect on other memory.
void setEmulatedAddressable(const void* p, uint64_t readable, uint64_t writable);

}  // namespace kiln::device
