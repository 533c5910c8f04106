// Storage blocks and tensor placement for the VM.
#include "vm/memory.h"

#include <cstring>
#include <new>

#include "device/cuda_stream.h"
#include "kiln/error.h"

namespace kiln::vm {

TensorMemory::TensorMemory(std::shared_ptr<MemoryPools> pools) : pools_(std::move(pools)) {}

Value TensorMemory::storage(uint64_t bytes, uint32_t alignment, Device device) {
  if (alignment > 64) throw Error("alloc_storage: alignment " + std::to_string(alignment) + " is not supported (at most 64)");
  dropRecycled();
  std::shared_ptr<void> buf = pool(device).allocateShared(bytes);
  count(bytes);
  return Value::storage(std::move(buf), bytes, device);
}

Tensor TensorMemory::tensor(DType dtype, std::span<const int64_t> shape, Device device) {
  dropRecycled();
  Tensor t = allocateTensor(pool(device), dtype, shape);
  count(t.nbytes());
  return t;
}

Tensor TensorMemory::copyTo(const Tensor& t, Device device) {
  Tensor out = tensor(t.dtype(), dims(t.shape()), device);
  if (!t.nbytes()) return out;
  if (t.device().kind == Device::Kind::CPU && device.kind == Device::Kind::CPU) std::memcpy(out.data(), t.data(), t.nbytes());
  else device::copyBytes(out.data(), device, t.data(), t.device(), t.nbytes());  // queued; to the host: waited for
  return out;
}

namespace {

Value hostScalar(const Tensor& t) {
  int64_t i = 0;
  double f = 0;
  readScalar(t.data(), t.dtype(), i, f);
  return isFloat(t.dtype()) ? Value::floatScalar(t.dtype(), f) : Value::intScalar(t.dtype(), i);
}

}  // namespace

Value TensorMemory::copyValue(const Value& v, Device device) {
  auto leaf = [&](const Value& x) -> Value {
    if (x.isScalar()) return device == Device{} ? x : Value(copyTo(x.tensor(), device));
    // A reference cell's copy is a new cell holding the copied content (one
    // level of recursion per nested cell).
    if (x.isRef()) return Value::ref(copyValue(x.asRef()->content, device));
    if (!x.isObject(ObjectKind::Tensor)) return x;
    const Tensor& t = x.asTensorObject()->tensor;
    if (t.device() == device) return x;
    Tensor out = copyTo(t, device);
    return device == Device{} && out.rank() == 0 ? hostScalar(out) : Value(std::move(out));
  };
  if (!v.isObject(ObjectKind::Adt)) return leaf(v);
  struct Pending {
    const AdtObject* adt;
    uint32_t next;
    std::vector<Value> fields;
  };
  std::vector<Pending> stack;
  stack.push_back({v.asAdt(), 0, {}});
  Value result;
  while (!stack.empty()) {
    Pending& p = stack.back();
    if (p.next < p.adt->size) {
      const Value& field = p.adt->fields()[p.next++];
      if (field.isObject(ObjectKind::Adt)) stack.push_back({field.asAdt(), 0, {}});  // p is not used after this
      else p.fields.push_back(leaf(field));
      continue;
    }
    Value built = p.adt->ctor == kTupleCtor ? Value::tuple(std::move(p.fields)) : Value::adt(p.adt->ctor, std::move(p.fields));
    stack.pop_back();
    if (stack.empty()) result = std::move(built);
    else stack.back().fields.push_back(std::move(built));
  }
  return result;
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
