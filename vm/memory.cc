// Storage blocks and tensor placement for the VM.
#include "vm/memory.h"

#include <atomic>
#include <cstring>
#include <new>

#include "kiln/error.h"

namespace kiln::vm {

struct TensorMemory::Counters {
  std::atomic<uint64_t> allocations{0}, bytes{0};
  std::atomic<int64_t> live{0}, peak{0};
  void add(int64_t n) {
    allocations++;
    bytes += static_cast<uint64_t>(n);
    int64_t now = live += n;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
};

TensorMemory::TensorMemory() : counters_(std::make_shared<Counters>()) {}

static void requireHost(Device d) {
  if (d.kind == Device::Kind::CUDA)
    throw Error("device " + d.toString() + " was requested, but this build of Kiln runs tensors on the CPU only");
}

Value TensorMemory::storage(uint64_t bytes, uint32_t alignment, Device device) {
  requireHost(device);
  if (bytes > (uint64_t(1) << 46)) throw Error("out of memory: storage of " + std::to_string(bytes) + " bytes");
  size_t align = std::max<size_t>(alignment, 64);
  size_t alloc = (bytes + 63) / 64 * 64 + 64;
  void* p = ::operator new(alloc, std::align_val_t(align), std::nothrow);
  if (!p) throw Error("out of memory: storage of " + std::to_string(bytes) + " bytes");
  auto counters = counters_;
  counters->add(static_cast<int64_t>(alloc));
  std::shared_ptr<void> buf(p, [counters, alloc, align](void* q) {
    counters->live -= static_cast<int64_t>(alloc);
    ::operator delete(q, std::align_val_t(align));
  });
  return Value::storage(std::move(buf), bytes, device);
}

void TensorMemory::count(uint64_t bytes) {
  counters_->allocations++;
  counters_->bytes += bytes;
}

Tensor TensorMemory::copyTo(const Tensor& t, Device device) {
  requireHost(device);
  requireHost(t.device());
  Tensor out = Tensor::empty(t.dtype(), t.shape(), device);
  if (t.nbytes()) std::memcpy(out.data(), t.data(), t.nbytes());
  count(t.nbytes());
  return out;
}

VMMemoryStats TensorMemory::stats() const {
  VMMemoryStats s;
  s.allocations = counters_->allocations;
  s.bytesAllocated = counters_->bytes;
  s.liveBytes = counters_->live;
  s.peakBytes = counters_->peak;
  return s;
}

Value placeTensor(const Value& storage, uint64_t offset, std::span<const int64_t> shape, DType dtype) {
  if (!storage.isObject(ObjectKind::Storage)) throw Error("alloc_tensor: expected storage, got " + storage.describe());
  const StorageObject* s = storage.asStorage();
  for (int64_t d : shape)
    if (d < 0) throw Error("alloc_tensor: negative dimension");
  uint64_t need = static_cast<uint64_t>(numElements(shape)) * dtypeSize(dtype);
  if (offset % 64 != 0 || offset > s->bytes || need > s->bytes - offset)
    throw Error("alloc_tensor: a " + std::to_string(need) + "-byte tensor at offset " + std::to_string(offset) +
                " does not fit in storage of " + std::to_string(s->bytes) + " bytes");
  std::shared_ptr<void> alias(s->buffer, static_cast<char*>(s->buffer.get()) + offset);
  return Value(Tensor::view(dtype, shape, std::move(alias), s->device));
}

}  // namespace kiln::vm
