// Tensors: n-dimensional arrays with an element type, a shape and a device.
//
// Representation: a Tensor is a small handle (shape inline for rank <= 6) that
// shares ownership of a contiguous, row-major, 64-byte aligned buffer; copying a
// Tensor copies the handle, not the data. Shapes are concrete at run time (no
// `?`). A default-constructed Tensor is "undefined" and owns nothing.
//
// Thread-safety: handles may be copied and destroyed from any thread (the buffer's
// reference count is atomic); writing the same buffer from two threads at once is
// the caller's business, as with any array.
#pragma once

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kiln/dtype.h"

namespace kiln {

using Shape = boost::container::small_vector<int64_t, 6>;

// CudaEmu is the emulated CUDA device (device/cuda_emu_driver.h): GPU kernels
// generated as for CUDA, run on the host by a stand-in driver, for testing and
// debugging the GPU path where no GPU is. It is a GPU to everything above the
// driver (placement, streams, pools, kernels); its memory is host memory that
// only kernels and copies touch.
struct Device {
  enum class Kind : uint8_t { CPU, CUDA, CudaEmu };
  Kind kind = Kind::CPU;
  uint16_t index = 0;

  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool isGpu() const { return kind != Kind::CPU; }
  // "cpu", "cpu:1", "cuda", "cuda:0", "cuda-emu", "cuda-emu:1"
  std::string toString() const;
  // Throws kiln::Error for anything else.
  static Device parse(const std::string& name);
};

int64_t numElements(std::span<const int64_t> shape);
std::string shapeString(std::span<const int64_t> shape);  // 2x3x4; "" for a scalar
inline std::span<const int64_t> dims(const Shape& s) { return {s.data(), s.size()}; }
inline int64_t numElements(const Shape& s) { return numElements(dims(s)); }
inline std::string shapeString(const Shape& s) { return shapeString(dims(s)); }

class Tensor {
 public:
  Tensor() = default;

  // Uninitialized storage of the given type and shape.
  static Tensor empty(DType dtype, std::span<const int64_t> shape, Device device = {});
  static Tensor empty(DType dtype, const Shape& shape, Device device = {}) { return empty(dtype, dims(shape), device); }
  static Tensor empty(DType dtype, std::initializer_list<int64_t> shape, Device device = {}) {
    return empty(dtype, std::span<const int64_t>(shape.begin(), shape.size()), device);
  }

  bool defined() const { return static_cast<bool>(buffer_); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return numElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype_); }
  Device device() const { return device_; }

  void* data() const { return buffer_.get(); }
  template <class T>
  T* data() const {
    return static_cast<T*>(buffer_.get());
  }

  // A tensor over memory someone else owns: `owner` keeps it alive. The memory must
  // be 64-byte aligned with at least max(64, nbytes) bytes readable.
  static Tensor view(DType dtype, std::span<const int64_t> shape, std::shared_ptr<void> owner, Device device = {});

  // How many owners share this tensor's memory (handles, views, storage blocks);
  // 1: this handle alone, so writing it affects no one else.
  long memoryUseCount() const { return buffer_.use_count(); }
  // The same data seen with another shape of equal element count (zero-copy).
  Tensor reshaped(std::span<const int64_t> shape) const;
  // This handle made a `dtype` tensor of `shape` over the start of its own memory,
  // which must need no more bytes than it has now: how a buffer no one else shares
  // is reused for the next result of its size (the VM's recycled outputs).
  void reuseAs(DType dtype, std::span<const int64_t> shape);

  // `2x3xf32=[[1 2 3] [4 5 6]]`, abbreviating past `maxElements`.
  std::string toString(size_t maxElements = 64) const;

 private:
  DType dtype_ = DType::Float32;
  Shape shape_;
  Device device_;
  std::shared_ptr<void> buffer_;
};

// One element of a dtype, read or written as int64 (integers, bools) or double (floats).
void writeScalar(void* p, DType dtype, int64_t i, double f);
// Sets `i` for integer and bool dtypes, `f` for float dtypes.
void readScalar(const void* p, DType dtype, int64_t& i, double& f);

}  // namespace kiln
