// DLPack import and export: shared memory when the layout allows it, copies
// otherwise, the producer's deleter called exactly once, and bad tensors refused
// with ownership left to the caller.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kiln/dlpack.h"
#include "kiln/error.h"

using namespace kiln;

namespace {
// A producer's tensor: memory from aligned_alloc at `offset` bytes past a 64-byte
// boundary, and a count of deleter calls.
struct Producer {
  DLManagedTensor managed{};
  std::vector<int64_t> shape, strides;
  char* memory = nullptr;
  int* deletes = nullptr;
};

DLManagedTensor* produce(int* deletes, std::vector<int64_t> shape, DLDataType dtype, size_t offset = 0,
                         std::vector<int64_t> strides = {}) {
  auto* p = new Producer;
  p->shape = std::move(shape);
  p->strides = std::move(strides);
  p->deletes = deletes;
  p->memory = static_cast<char*>(std::aligned_alloc(64, 4096));
  std::memset(p->memory, 0, 4096);
  DLTensor& t = p->managed.dl_tensor;
  t.data = p->memory + offset;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int>(p->shape.size());
  t.dtype = dtype;
  t.shape = p->shape.data();
  t.strides = p->strides.empty() ? nullptr : p->strides.data();
  p->managed.manager_ctx = p;
  p->managed.deleter = [](DLManagedTensor* m) {
    auto* p = static_cast<Producer*>(m->manager_ctx);
    ++*p->deletes;
    std::free(p->memory);
    delete p;
  };
  return &p->managed;
}
constexpr DLDataType kF32{kDLFloat, 32, 1};
}  // namespace

TEST_CASE("dlpack: an aligned compact tensor is shared, and its deleter runs with the last reference") {
  int deletes = 0;
  DLManagedTensor* m = produce(&deletes, {4, 8}, kF32);
  auto* data = static_cast<float*>(m->dl_tensor.data);
  for (int i = 0; i < 32; ++i) data[i] = static_cast<float>(i);
  CHECK(dlpackSharesMemory(m->dl_tensor));
  Tensor t = fromDLPack(m);
  CHECK(t.data() == data);
  CHECK(t.dtype() == DType::Float32);
  CHECK(t.shape() == Shape{4, 8});
  Tensor copy = t;
  t = Tensor();
  CHECK(deletes == 0);
  CHECK(copy.data<float>()[31] == 31.0f);
  copy = Tensor();
  CHECK(deletes == 1);
}

TEST_CASE("dlpack: unaligned, small or strided host tensors are copied and released at once") {
  int deletes = 0;
  // Unaligned (a numpy slice, say).
  DLManagedTensor* m = produce(&deletes, {16}, kF32, 4);
  static_cast<float*>(m->dl_tensor.data)[15] = 7.0f;
  CHECK_FALSE(dlpackSharesMemory(m->dl_tensor));
  Tensor a = fromDLPack(m);
  CHECK(deletes == 1);
  CHECK(a.data<float>()[15] == 7.0f);
  // Fewer than 64 bytes: kernels may read a whole vector.
  Tensor b = fromDLPack(produce(&deletes, {3}, kF32));
  CHECK(deletes == 2);
  CHECK(b.numel() == 3);
  // A transposed 2x3 view of a 3x2 row-major array: strides (1, 2).
  m = produce(&deletes, {2, 3}, kF32, 0, {1, 2});
  auto* d = static_cast<float*>(m->dl_tensor.data);
  for (int i = 0; i < 6; ++i) d[i] = static_cast<float>(i);  // 3x2: [[0 1] [2 3] [4 5]]
  Tensor c = fromDLPack(m);
  CHECK(deletes == 3);
  std::vector<float> got(c.data<float>(), c.data<float>() + 6);
  CHECK(got == std::vector<float>{0, 2, 4, 1, 3, 5});
  // Strides of extent-1 dimensions do not matter: still shared.
  m = produce(&deletes, {1, 16}, kF32, 0, {999, 1});
  CHECK(dlpackSharesMemory(m->dl_tensor));
  Tensor e = fromDLPack(m);
  CHECK(deletes == 3);
  e = Tensor();
  CHECK(deletes == 4);
}

TEST_CASE("dlpack: tensors Kiln cannot take are refused and stay the caller's") {
  int deletes = 0;
  DLManagedTensor* m = produce(&deletes, {4}, DLDataType{kDLComplex, 64, 1});
  CHECK_THROWS_WITH_AS(fromDLPack(m), doctest::Contains("no Kiln counterpart"), Error);
  m->dl_tensor.dtype = DLDataType{kDLFloat, 32, 4};
  CHECK_THROWS_WITH_AS(fromDLPack(m), doctest::Contains("4 lanes"), Error);
  m->dl_tensor.dtype = kF32;
  m->dl_tensor.device = {kDLOpenCL, 0};
  CHECK_THROWS_WITH_AS(fromDLPack(m), doctest::Contains("not one Kiln runs on"), Error);
  m->dl_tensor.device = {kDLCPU, 0};
  int64_t huge[3] = {int64_t{1} << 40, int64_t{1} << 40, 16};
  m->dl_tensor.shape = huge;
  m->dl_tensor.ndim = 3;
  CHECK_THROWS_WITH_AS(fromDLPack(m), doctest::Contains("overflows"), Error);
  int64_t negative[1] = {-1};
  m->dl_tensor.shape = negative;
  m->dl_tensor.ndim = 1;
  CHECK_THROWS_WITH_AS(fromDLPack(m), doctest::Contains("negative extent"), Error);
  m->dl_tensor.ndim = -2;
  CHECK_THROWS_WITH_AS(fromDLPack(m), doctest::Contains("rank -2"), Error);
  // A GPU tensor that would need a copy (unaligned).
  m->dl_tensor.ndim = 1;
  int64_t four[1] = {4};
  m->dl_tensor.shape = four;
  m->dl_tensor.device = {kDLCUDA, 0};
  m->dl_tensor.byte_offset = 4;
  CHECK_THROWS_WITH_AS(fromDLPack(m), doctest::Contains("GPU memory only as it is"), Error);
  CHECK(deletes == 0);
  m->deleter(m);
  CHECK(deletes == 1);
}

TEST_CASE("dlpack: export shares the tensor's memory until the consumer's deleter call") {
  Tensor t = Tensor::empty(DType::Int64, {3, 5});
  for (int i = 0; i < 15; ++i) t.data<int64_t>()[i] = i * 10;
  DLManagedTensor* m = toDLPack(t);
  CHECK(m->dl_tensor.data == t.data());
  CHECK(m->dl_tensor.ndim == 2);
  CHECK(m->dl_tensor.shape[0] == 3);
  CHECK(m->dl_tensor.shape[1] == 5);
  CHECK(m->dl_tensor.strides == nullptr);
  CHECK(m->dl_tensor.dtype.code == kDLInt);
  CHECK(m->dl_tensor.dtype.bits == 64);
  CHECK(m->dl_tensor.device.device_type == kDLCPU);
  void* data = t.data();
  t = Tensor();  // the exported tensor keeps the memory
  CHECK(static_cast<int64_t*>(m->dl_tensor.data)[14] == 140);
  // And back in: the same memory, no copy.
  Tensor back = fromDLPack(m);
  CHECK(back.data() == data);
  CHECK(back.data<int64_t>()[7] == 70);
  CHECK(toDLDataType(DType::Bool).code == kDLBoolCode);
  CHECK(fromDLDataType(toDLDataType(DType::Float16)) == DType::Float16);
  CHECK(fromDLDataType(toDLDataType(DType::UInt16)) == DType::UInt16);
}
