// GPU streams: the ordered queue of one VM's GPU work, the calling thread's
// current stream, copies between host and GPU memory, and kernel timing.
//
// Model: every launch and copy goes to a stream and returns without waiting; the
// host waits only where a value crosses to the host (a device-to-host copy) and
// where a VM finishes an invocation. A VM owns one CudaStream per GPU it uses and
// makes it current on its thread (CudaStreamScope) while it runs. Work issued
// with no current stream (the C++ kernel interface, tensors made outside a VM)
// goes to a process-wide stream of that GPU and is waited for before the call
// returns, so that interface stays synchronous.
//
// Memory: pooled GPU blocks remember the stream they were freed under (see
// DeviceMemory::streamTag); handing one to another stream first waits for the
// first (awaitStreamTag). Tags of destroyed streams are simply gone: a stream
// waits for its work before it is destroyed.
//
// Thread-safety: a CudaStream is used by one thread at a time (its VM's); the
// current-stream binding is per thread; the tag registry is locked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::device {

class CudaStream {
 public:
  // A new stream on the primary context of `device` (a cuda device); throws
  // kiln::Error when CUDA is unavailable.
  explicit CudaStream(Device device);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const { return device_; }
  void* handle() const { return stream_; }  // a CUstream
  uint64_t tag() const { return tag_; }
  // Waits until everything queued so far has run; a kernel's failure shows here.
  void synchronize();

  // GPU time of kernel launches, measured with events around them: begin before
  // the launch, end after it with the caller's id; drain() (after synchronize)
  // hands back (id, nanoseconds) for every finished pair.
  void timeBegin();
  void timeEnd(uint32_t id);
  std::vector<std::pair<uint32_t, uint64_t>> drainTimings();

 private:
  Device device_;
  void* stream_ = nullptr;
  uint64_t tag_ = 0;
  struct Timing {
    void* start;
    void* end;
    uint32_t id;
  };
  std::vector<Timing> pending_;
  std::vector<void*> spareEvents_;
  void* event();
};

// Makes `stream` the current stream of its device on this thread while alive
// (scopes nest; the previous binding comes back).
class CudaStreamScope {
 public:
  explicit CudaStreamScope(CudaStream* stream);
  ~CudaStreamScope();
  CudaStreamScope(const CudaStreamScope&) = delete;
  CudaStreamScope& operator=(const CudaStreamScope&) = delete;

 private:
  Device device_;
  CudaStream* previous_;
};

// The stream work for `device` goes to on this thread. `synchronous` is set when
// it is the process-wide stream, whose callers wait before returning.
CudaStream& streamFor(Device device, bool& synchronous);
// The tag of this thread's current stream for `device` (0 when none is bound).
uint64_t currentStreamTag(Device device);
// Waits for the stream with `tag` if it still exists.
void awaitStreamTag(uint64_t tag);

// Copies `bytes` from `src` on `from` to `dst` on `to`, where at least one side
// is a GPU. To the host: returns when the data is there. Otherwise queued on the
// GPU side's current stream; the source may be reused when this returns.
void copyBytes(void* dst, Device to, const void* src, Device from, size_t bytes);

}  // namespace kiln::device
