// GpuStreams: a VM's CUDA streams, one per GPU it runs on. Its launches and
// copies queue there (current on the VM's thread during invoke()); invoke() waits
// for them before it returns and adds the GPU kernel times to the profile. Used
// by one thread at a time, as its VM is.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "device/cuda_stream.h"
#include "kiln/vm.h"

namespace kiln::vm {

class GpuStreams {
 public:
  // The stream for `device`, made on first use (throws kiln::Error without CUDA).
  device::CudaStream& on(Device device);
  bool empty() const { return streams_.empty(); }

  // Scopes making this VM's streams current on the calling thread: for each GPU
  // among `devices` (made on demand), or for every stream made so far.
  using Scopes = std::vector<std::unique_ptr<device::CudaStreamScope>>;
  Scopes enter(std::span<const Device> devices);
  Scopes enterAll();

  // Waits for every stream and adds its kernels' GPU times to `profile`. After a
  // failure (`failed`), errors the streams report are dropped: the one being
  // reported matters more.
  void finish(bool failed, std::vector<KernelProfile>& profile);

 private:
  std::vector<std::unique_ptr<device::CudaStream>> streams_;
};

}  // namespace kiln::vm
