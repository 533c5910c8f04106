// DLPack import and export (kiln/dlpack.h).
#include "kiln/dlpack.h"

#include <cstring>
#include <memory>
#include <vector>

#include "kiln/error.h"

namespace kiln {

DLDataType toDLDataType(DType dtype) {
  auto bits = static_cast<uint8_t>(dtypeSize(dtype) * 8);
  switch (dtype) {
    case DType::Float16: case DType::Float32: case DType::Float64: return {kDLFloat, bits, 1};
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64: return {kDLInt, bits, 1};
    case DType::UInt8: case DType::UInt16: return {kDLUInt, bits, 1};
    case DType::Bool: return {kDLBoolCode, 8, 1};
  }
  throw Error("dtype has no DLPack counterpart");
}

DType fromDLDataType(DLDataType t) {
  if (t.lanes != 1) throw Error("DLPack tensor with " + std::to_string(t.lanes) + " lanes per element (Kiln has scalar elements only)");
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 16) return DType::Float16;
      if (t.bits == 32) return DType::Float32;
      if (t.bits == 64) return DType::Float64;
      break;
    case kDLInt:
      if (t.bits == 8) return DType::Int8;
      if (t.bits == 16) return DType::Int16;
      if (t.bits == 32) return DType::Int32;
      if (t.bits == 64) return DType::Int64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::UInt8;
      if (t.bits == 16) return DType::UInt16;
      break;
    case kDLBoolCode:
      if (t.bits == 8) return DType::Bool;
      break;
    default: break;
  }
  throw Error("DLPack dtype (code " + std::to_string(t.code) + ", " + std::to_string(t.bits) +
              " bits) has no Kiln counterpart");
}

namespace {

Device fromDLDevice(DLDevice d) {
  if (d.device_id < 0 || d.device_id > 0xFFFF) throw Error("DLPack device id " + std::to_string(d.device_id) + " out of range");
  auto index = static_cast<uint16_t>(d.device_id);
  switch (d.device_type) {
    // Pinned host memory is host memory.
    case kDLCPU: case kDLCUDAHost: return Device{Device::Kind::CPU, 0};
    case kDLCUDA: return Device{Device::Kind::CUDA, index};
    default: throw Error("DLPack device type " + std::to_string(static_cast<int>(d.device_type)) + " is not one Kiln runs on");
  }
}

// The tensor's shape checked (ndim, no negative extents, the byte size fits), and its byte size.
uint64_t checkedBytes(const DLTensor& t, DType dtype, Shape& shape) {
  if (t.ndim < 0 || t.ndim > 64) throw Error("DLPack tensor of rank " + std::to_string(t.ndim) + " (at most 64)");
  if (t.ndim > 0 && !t.shape) throw Error("DLPack tensor without a shape array");
  shape.assign(t.shape, t.shape + t.ndim);
  uint64_t bytes = dtypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) throw Error("DLPack tensor with negative extent in shape " + shapeString(shape));
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      throw Error("DLPack tensor of shape " + shapeString(shape) + " overflows a byte count");
  }
  if (bytes > (uint64_t{1} << 62)) throw Error("DLPack tensor of shape " + shapeString(shape) + " is larger than any device");
  return bytes;
}

// Compact row-major, where extents of 1 (and any stride of an empty tensor) do not count.
bool compact(const DLTensor& t, const Shape& shape) {
  if (!t.strides) return true;
  for (int64_t d : shape)
    if (d == 0) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

struct Layout {
  DType dtype;
  Device device;
  Shape shape;
  uint64_t bytes;
  const char* data;
  bool shares;
};

Layout inspect(const DLTensor& t) {
  Layout l{fromDLDataType(t.dtype), fromDLDevice(t.device), {}, 0, nullptr, false};
  l.bytes = checkedBytes(t, l.dtype, l.shape);
  if (l.bytes > 0 && !t.data) throw Error("DLPack tensor of " + std::to_string(l.bytes) + " bytes with a null data pointer");
  uintptr_t p = reinterpret_cast<uintptr_t>(t.data);
  if (__builtin_add_overflow(p, t.byte_offset, &p)) throw Error("DLPack tensor's byte offset overflows its data pointer");
  l.data = reinterpret_cast<const char*>(p);
  // Kernels read whole 64-byte vectors: the memory must be aligned for them and
  // a vector long (tensor views promise max(64, bytes) readable bytes).
  l.shares = compact(t, l.shape) && (l.bytes == 0 || (p % 64 == 0 && l.bytes >= 64));
  if (!l.shares && l.device.kind != Device::Kind::CPU)
    throw Error("DLPack tensor on " + l.device.toString() +
                " is strided or not 64-byte aligned; Kiln can take GPU memory only as it is");
  return l;
}

// Copies a strided host tensor element by element into compact memory.
void copyStrided(const DLTensor& t, const Layout& l, char* out) {
  size_t elem = dtypeSize(l.dtype), rank = l.shape.size();
  int64_t n = numElements(l.shape);
  if (n == 0) return;
  if (compact(t, l.shape)) {
    std::memcpy(out, l.data, static_cast<size_t>(n) * elem);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d) offset += index[d] * t.strides[d];
    std::memcpy(out + static_cast<size_t>(k) * elem, l.data + offset * static_cast<int64_t>(elem), elem);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < l.shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

bool dlpackSharesMemory(const DLTensor& t) { return inspect(t).shares; }

Tensor fromDLPack(DLManagedTensor* managed) {
  if (!managed) throw Error("null DLPack tensor");
  Layout l = inspect(managed->dl_tensor);
  if (l.shares) {
    std::shared_ptr<void> owner(const_cast<char*>(l.data), [managed](void*) {
      if (managed->deleter) managed->deleter(managed);
    });
    return Tensor::view(l.dtype, dims(l.shape), std::move(owner), l.device);
  }
  Tensor copy = Tensor::empty(l.dtype, l.shape);
  copyStrided(managed->dl_tensor, l, static_cast<char*>(copy.data()));
  if (managed->deleter) managed->deleter(managed);
  return copy;
}

namespace {
// What an exported tensor's manager_ctx points at: the reference that keeps the
// memory alive and the shape array the DLTensor points into.
struct ExportedTensor {
  DLManagedTensor managed;
  Tensor tensor;
  std::vector<int64_t> shape;
};
}  // namespace

DLManagedTensor* toDLPack(const Tensor& tensor) {
  if (!tensor.defined()) throw Error("cannot export an undefined tensor through DLPack");
  auto* e = new ExportedTensor{};
  e->tensor = tensor;
  e->shape.assign(tensor.shape().begin(), tensor.shape().end());
  DLTensor& t = e->managed.dl_tensor;
  t.data = tensor.data();
  Device d = tensor.device();
  // The emulated GPU's memory is host memory, ready once its (synchronous) work is queued.
  t.device = DLDevice{d.kind == Device::Kind::CUDA ? kDLCUDA : kDLCPU, d.kind == Device::Kind::CUDA ? d.index : 0};
  t.ndim = static_cast<int>(e->shape.size());
  t.dtype = toDLDataType(tensor.dtype());
  t.shape = e->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<ExportedTensor*>(m->manager_ctx); };
  return &e->managed;
}

}  // namespace kiln
