// GpuStreams: per-VM CUDA streams, their scopes, and the wait at the end of a call.
#include "vm/gpu_streams.h"

#include "kiln/error.h"

namespace kiln::vm {

device::CudaStream& GpuStreams::on(Device device) {
  for (auto& s : streams_)
    if (s->device() == device) return *s;
  streams_.push_back(std::make_unique<device::CudaStream>(device));
  return *streams_.back();
}

GpuStreams::Scopes GpuStreams::enter(std::span<const Device> devices) {
  Scopes scopes;
  for (Device d : devices)
    if (d.isGpu()) scopes.push_back(std::make_unique<device::CudaStreamScope>(&on(d)));
  return scopes;
}

GpuStreams::Scopes GpuStreams::enterAll() {
  Scopes scopes;
  for (auto& s : streams_) scopes.push_back(std::make_unique<device::CudaStreamScope>(s.get()));
  return scopes;
}

void GpuStreams::finish(bool failed, std::vector<KernelProfile>& profile) {
  for (auto& s : streams_) {
    if (failed) {
      try {
        s->synchronize();
      } catch (const Error&) {
      }
    } else {
      s->synchronize();
    }
    for (auto [kernel, nanos] : s->drainTimings())
      if (kernel < profile.size()) profile[kernel].totalNanos += nanos;
  }
}

}  // namespace kiln::vm
