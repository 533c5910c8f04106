// Storage blocks and tensor placement for the VM.
#include "vm/memory.h"

#include <cstring>
#include <new>

#include "kiln/error.h"

namespace kiln::vm {

TensorMemory::TensorMemory(std::shared_ptr<MemoryPools> pools) : pools_(std::move(pools)) {}

Value TensorMemory::storage(uint64_t bytes, uint32_t alignment, Device device) {
  if (alignment > 64) throw Error("alloc_storage: alignment " + std::to_string(alignment) + " is not supported (at most 64)");
  std::shared_ptr<void> buf = pool(device).allocateShared(bytes);
  allocations_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return Value::storage(std::move(buf), bytes, device);
}

Tensor TensorMemory::tensor(DType dtype, std::span<const int64_t> shape, Device device) {
  Tensor t = allocateTensor(pool(device), dtype, shape);
  allocations_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(t.nbytes(), std::memory_order_relaxed);
  return t;
}

Tensor TensorMemory::copyTo(const Tensor& t, Device device) {
  if (t.device().kind != Device::Kind::CPU || device.kind != Device::Kind::CPU)
    throw Error("device_copy from " + t.device().toString() + " to " + device.toString() +
                ": this build of Kiln runs tensors on the CPU only");
  Tensor out = tensor(t.dtype(), dims(t.shape()), device);
  if (t.nbytes()) std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

VMMemoryStats TensorMemory::stats() const {
  VMMemoryStats s;
  s.allocations = allocations_.load();
  s.bytesAllocated = bytes_.load();
  s.pools = pools_->stats();
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
