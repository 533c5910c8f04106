// GPU streams, the per-thread current stream, stream tags, copies and event timing.
#include "device/cuda_stream.h"

#include <map>
#include <memory>
#include <mutex>

#include "device/cuda_driver.h"
#include "kiln/error.h"

namespace kiln::device {

#if KILN_HAVE_CUDA_H

namespace {

// Live streams by tag, so a pool can wait for one that may since have finished.
struct Registry {
  std::mutex mu;
  uint64_t nextTag = 1;
  std::map<uint64_t, CudaStream*> live;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: blocks may be freed at exit
  return *r;
}

constexpr size_t kMaxGpus = 64;
// Per GPU of each kind: real ones first, then emulated ones.
constexpr size_t kSlots = 2 * kMaxGpus;
thread_local CudaStream* current[kSlots] = {};

bool hasSlot(Device d) { return d.isGpu() && d.index < kMaxGpus; }
size_t slotOf(Device d) { return d.index + (d.kind == Device::Kind::CudaEmu ? kMaxGpus : 0); }

CUstream cu(void* s) { return static_cast<CUstream>(s); }
CUevent ev(void* e) { return static_cast<CUevent>(e); }
CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

}  // namespace

CudaStream::CudaStream(Device device) : device_(device) {
  if (!hasSlot(device)) throw Error(device.toString() + " is not a GPU");
  const CudaDriver& d = CudaDriver::get(device);
  d.use(device.index);
  CUstream s = nullptr;
  d.check(d.streamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  stream_ = s;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  tag_ = r.nextTag++;
  r.live.emplace(tag_, this);
}

CudaStream::~CudaStream() {
  const CudaDriver& d = CudaDriver::get(device_);
  {
    // Unregistered under the lock, so awaitStreamTag never sees it half destroyed.
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.erase(tag_);
  }
  try {
    d.use(device_.index);
  } catch (const Error&) {
    return;
  }
  d.streamSynchronize(cu(stream_));
  for (const Timing& t : pending_) {
    d.eventDestroy(ev(t.start));
    d.eventDestroy(ev(t.end));
  }
  for (void* e : spareEvents_) d.eventDestroy(ev(e));
  d.streamDestroy(cu(stream_));
}

void CudaStream::synchronize() {
  const CudaDriver& d = CudaDriver::get(device_);
  d.use(device_.index);
  d.check(d.streamSynchronize(cu(stream_)), ("running kernels on " + device_.toString()).c_str());
}

void* CudaStream::event() {
  if (!spareEvents_.empty()) {
    void* e = spareEvents_.back();
    spareEvents_.pop_back();
    return e;
  }
  const CudaDriver& d = CudaDriver::get(device_);
  CUevent e = nullptr;
  d.check(d.eventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
  return e;
}

void CudaStream::timeBegin() {
  const CudaDriver& d = CudaDriver::get(device_);
  void* e = event();
  d.check(d.eventRecord(ev(e), cu(stream_)), "cuEventRecord");
  pending_.push_back({e, nullptr, 0});
}

void CudaStream::timeEnd(uint32_t id) {
  if (pending_.empty() || pending_.back().end) return;
  const CudaDriver& d = CudaDriver::get(device_);
  void* e = event();
  d.check(d.eventRecord(ev(e), cu(stream_)), "cuEventRecord");
  pending_.back().end = e;
  pending_.back().id = id;
}

std::vector<std::pair<uint32_t, uint64_t>> CudaStream::drainTimings() {
  const CudaDriver& d = CudaDriver::get(device_);
  std::vector<std::pair<uint32_t, uint64_t>> out;
  for (const Timing& t : pending_) {
    if (t.end) {
      d.check(d.eventSynchronize(ev(t.end)), "cuEventSynchronize");
      float ms = 0;
      d.check(d.eventElapsedTime(&ms, ev(t.start), ev(t.end)), "cuEventElapsedTime");
      out.emplace_back(t.id, static_cast<uint64_t>(static_cast<double>(ms) * 1e6));
      spareEvents_.push_back(t.end);
    }
    spareEvents_.push_back(t.start);
  }
  pending_.clear();
  return out;
}

CudaStreamScope::CudaStreamScope(CudaStream* stream) : device_(stream->device()) {
  previous_ = current[slotOf(device_)];
  current[slotOf(device_)] = stream;
}

CudaStreamScope::~CudaStreamScope() { current[slotOf(device_)] = previous_; }

CudaStream& streamFor(Device device, bool& synchronous) {
  if (!hasSlot(device)) throw Error(device.toString() + " is not a GPU");
  if (CudaStream* s = current[slotOf(device)]) {
    synchronous = false;
    return *s;
  }
  synchronous = true;
  static std::mutex mu;
  static std::unique_ptr<CudaStream>* shared = new std::unique_ptr<CudaStream>[kSlots];  // process lifetime
  std::lock_guard<std::mutex> lock(mu);
  auto& s = shared[slotOf(device)];
  if (!s) s = std::make_unique<CudaStream>(device);
  return *s;
}

uint64_t currentStreamTag(Device device) {
  if (!hasSlot(device)) return 0;
  CudaStream* s = current[slotOf(device)];
  return s ? s->tag() : 0;
}

void awaitStreamTag(uint64_t tag) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(tag);
  if (it == r.live.end()) return;
  const CudaDriver& d = CudaDriver::get(it->second->device());
  d.use(it->second->device().index);
  d.streamSynchronize(cu(it->second->handle()));
}

void copyBytes(void* dst, Device to, const void* src, Device from, size_t bytes) {
  if (bytes == 0) return;
  bool toGpu = to.isGpu(), fromGpu = from.isGpu();
  if (toGpu && fromGpu && to.kind != from.kind) {
    // Between a GPU and the emulated one (two drivers): through host memory.
    std::vector<unsigned char> staging(bytes);
    copyBytes(staging.data(), Device{}, src, from, bytes);
    copyBytes(dst, to, staging.data(), Device{}, bytes);
    return;
  }
  bool synchronous = false;
  CudaStream& s = streamFor(toGpu ? to : from, synchronous);
  const CudaDriver& d = CudaDriver::get(s.device());
  d.use(s.device().index);
  if (toGpu && fromGpu) {
    d.check(d.memcpyDtoDAsync(dptr(dst), dptr(src), bytes, cu(s.handle())), "cuMemcpyDtoDAsync");
  } else if (toGpu) {
    d.check(d.memcpyHtoDAsync(dptr(dst), src, bytes, cu(s.handle())), "cuMemcpyHtoDAsync");
  } else {
    d.check(d.memcpyDtoHAsync(dst, dptr(src), bytes, cu(s.handle())), "cuMemcpyDtoHAsync");
    synchronous = true;  // the host reads it next
  }
  if (synchronous) s.synchronize();
}

#else

CudaStream::CudaStream(Device) { throw Error(cudaUnavailableReason()); }
CudaStream::~CudaStream() = default;
void CudaStream::synchronize() {}
void* CudaStream::event() { return nullptr; }
void CudaStream::timeBegin() {}
void CudaStream::timeEnd(uint32_t) {}
std::vector<std::pair<uint32_t, uint64_t>> CudaStream::drainTimings() { return {}; }
CudaStreamScope::CudaStreamScope(CudaStream* stream) : device_(stream->device()), previous_(nullptr) {}
CudaStreamScope::~CudaStreamScope() = default;
CudaStream& streamFor(Device, bool&) { throw Error(cudaUnavailableReason()); }
uint64_t currentStreamTag(Device) { return 0; }
void awaitStreamTag(uint64_t) {}
void copyBytes(void*, Device, const void*, Device, size_t) { throw Error(cudaUnavailableReason()); }

#endif

}  // namespace kiln::device
