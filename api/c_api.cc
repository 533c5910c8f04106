// The C API (kiln/kiln.h) over the C++ runtime API: handles that own C++ objects,
// and every exception turned into a status object at the boundary.
#include "kiln/kiln.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/dlpack.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/runtime.h"
#include "kiln/vm.h"

struct kiln_status {
  kiln_status_code code;
  std::string message;
};
struct kiln_executable {
  std::shared_ptr<const kiln::Executable> exe;
};
struct kiln_runtime {
  std::shared_ptr<kiln::Runtime> runtime;
};
struct kiln_vm {
  std::unique_ptr<kiln::VirtualMachine> vm;
  bool resultsOnGpu = false;  // the executable places values on a GPU: copy results back
  // A VM runs on one thread at a time: a second thread's invoke is an error, not a race.
  std::atomic<bool> busy{false};
};
// Invariant: a register scalar is never held here (it becomes a 0-d tensor when
// the handle is made), so a tensor handle always has a TensorObject whose shape
// and data pointers stay put while the handle lives.
struct kiln_value {
  kiln::Value value;
};

namespace {

// Status objects are allocated; when even that fails, this one is returned
// (and kiln_status_release leaves it alone).
kiln_status outOfMemoryStatus{KILN_OUT_OF_MEMORY, "error: out of memory"};

struct InvalidArgument {
  std::string message;
};

kiln_status* makeStatus(kiln_status_code code, const std::string& message) noexcept {
  try {
    return new kiln_status{code, message};
  } catch (...) {
    return &outOfMemoryStatus;
  }
}

// Runs `body`, turning whatever it throws into a status: nothing escapes into C.
template <class Body>
kiln_status* guarded(Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const InvalidArgument& e) {
    return makeStatus(KILN_INVALID_ARGUMENT, "error: " + e.message);
  } catch (const kiln::Error& e) {
    bool oom = e.message().rfind("out of memory", 0) == 0;
    return makeStatus(oom ? KILN_OUT_OF_MEMORY : KILN_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return &outOfMemoryStatus;
  } catch (const std::exception& e) {
    return makeStatus(KILN_INTERNAL, std::string("error: internal: ") + e.what());
  } catch (...) {
    return makeStatus(KILN_INTERNAL, "error: internal: unknown exception");
  }
}

template <class T>
void require(const T* p, const char* what) {
  if (!p) throw InvalidArgument{std::string(what) + " is null"};
}

// A dtype as the caller passed it. C callers may pass any int in an enum, and
// loading an out-of-range value as the C++ enum type is undefined: read its bytes.
int rawDType(const kiln_dtype& dtype) {
  std::underlying_type_t<kiln_dtype> raw;
  static_assert(sizeof raw == sizeof dtype);
  std::memcpy(&raw, &dtype, sizeof raw);
  return static_cast<int>(raw);
}

kiln::DType checkedDType(const kiln_dtype& dtype) {
  int raw = rawDType(dtype);
  if (raw < 0 || raw >= kiln::kNumDTypes) throw InvalidArgument{"unknown dtype " + std::to_string(raw)};
  return static_cast<kiln::DType>(raw);
}

// The shape checked (no negative extents, a byte count that fits) and its bytes.
uint64_t checkedShape(kiln::DType dtype, const int64_t* shape, size_t ndim, kiln::Shape& out) {
  if (ndim > 0) require(shape, "shape");
  if (ndim > 64) throw InvalidArgument{"rank " + std::to_string(ndim) + " (at most 64)"};
  out.assign(shape, shape + ndim);
  uint64_t bytes = kiln::dtypeSize(dtype);
  for (int64_t d : out) {
    if (d < 0) throw InvalidArgument{"negative extent in shape " + kiln::shapeString(out)};
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      throw kiln::Error("out of memory: a tensor of shape " + kiln::shapeString(out) + " is larger than any device");
  }
  return bytes;
}

kiln_value* newValue(kiln::Value v) {
  auto* h = new kiln_value{};
  h->value = v.isScalar() ? kiln::Value(v.tensor()) : std::move(v);
  return h;
}

const kiln::Tensor& tensorOf(const kiln_value* v) {
  require(v, "value");
  if (!v->value.isObject(kiln::ObjectKind::Tensor))
    throw InvalidArgument{"value is " + v->value.describe() + ", not a tensor"};
  return v->value.asTensorObject()->tensor;
}

std::vector<kiln::Value> valuesOf(kiln_value* const* values, size_t n, const char* what) {
  if (n > 0) require(values, what);
  std::vector<kiln::Value> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!values[i]) throw InvalidArgument{std::string(what) + "[" + std::to_string(i) + "] is null"};
    out.push_back(values[i]->value);
  }
  return out;
}

}  // namespace

extern "C" {

int kiln_c_api_version(void) { return KILN_C_API_VERSION; }

kiln_status_code kiln_status_code_of(const kiln_status* status) { return status ? status->code : KILN_OK; }
const char* kiln_status_message(const kiln_status* status) { return status ? status->message.c_str() : ""; }
void kiln_status_release(kiln_status* status) {
  if (status != &outOfMemoryStatus) delete status;
}

size_t kiln_dtype_size(kiln_dtype dtype) {
  int raw = rawDType(dtype);
  return raw >= 0 && raw < kiln::kNumDTypes ? kiln::dtypeSize(static_cast<kiln::DType>(raw)) : 0;
}

kiln_status* kiln_executable_load(const char* path, kiln_executable** out) {
  return guarded([&] {
    require(path, "path");
    require(out, "out");
    auto h = std::make_unique<kiln_executable>();
    h->exe = kiln::Executable::load(path);
    *out = h.release();
  });
}

kiln_status* kiln_executable_load_bytes(const void* bytes, size_t size, kiln_executable** out) {
  return guarded([&] {
    if (size > 0) require(bytes, "bytes");
    require(out, "out");
    auto h = std::make_unique<kiln_executable>();
    h->exe = kiln::Executable::fromBytes({static_cast<const uint8_t*>(bytes), size});
    *out = h.release();
  });
}

void kiln_executable_release(kiln_executable* exe) { delete exe; }

size_t kiln_executable_function_count(const kiln_executable* exe) { return exe ? exe->exe->functions().size() : 0; }

const char* kiln_executable_function_name(const kiln_executable* exe, size_t index) {
  if (!exe || index >= exe->exe->functions().size()) return nullptr;
  return exe->exe->functions()[index].name.c_str();
}

const char* kiln_executable_constructor_name(const kiln_executable* exe, uint32_t constructor) {
  if (!exe || constructor >= exe->exe->constructors().size()) return nullptr;
  return exe->exe->constructors()[constructor].name.c_str();
}

kiln_status* kiln_runtime_create(int num_threads, const char* kernel_cache_dir, kiln_runtime** out) {
  return guarded([&] {
    require(out, "out");
    if (num_threads < 0 || num_threads > 4096) throw InvalidArgument{"num_threads " + std::to_string(num_threads)};
    kiln::RuntimeOptions options;
    options.numThreads = num_threads;
    if (kernel_cache_dir) options.kernelCacheDir = kernel_cache_dir;
    auto h = std::make_unique<kiln_runtime>();
    h->runtime = kiln::Runtime::create(options);
    *out = h.release();
  });
}

void kiln_runtime_release(kiln_runtime* runtime) { delete runtime; }

kiln_status* kiln_vm_create(const kiln_executable* exe, kiln_runtime* runtime, kiln_vm** out) {
  return kiln_vm_create_with_time_limit(exe, runtime, 0, out);
}

kiln_status* kiln_vm_create_with_time_limit(const kiln_executable* exe, kiln_runtime* runtime, uint64_t time_limit_us,
                                            kiln_vm** out) {
  return guarded([&] {
    require(exe, "executable");
    require(out, "out");
    constexpr auto kMaxMicros = std::chrono::microseconds(kiln::VMOptions::kMaxTimeLimit).count();
    if (time_limit_us > static_cast<uint64_t>(kMaxMicros))
      throw InvalidArgument{"time_limit_us: " + std::to_string(time_limit_us) + " (more than a year)"};
    kiln::VMOptions options;
    if (runtime) options.runtime = runtime->runtime;
    options.timeLimit = std::chrono::microseconds(time_limit_us);
    auto h = std::make_unique<kiln_vm>();
    h->vm = std::make_unique<kiln::VirtualMachine>(exe->exe, options);
    for (const kiln::Device& d : exe->exe->devices())
      if (d.isGpu()) h->resultsOnGpu = true;
    *out = h.release();
  });
}

void kiln_vm_request_stop(kiln_vm* vm) {
  if (vm) vm->vm->requestStop();
}

void kiln_vm_release(kiln_vm* vm) { delete vm; }

kiln_status* kiln_vm_invoke(kiln_vm* vm, const char* function, kiln_value* const* args, size_t num_args,
                            kiln_value** result) {
  return guarded([&] {
    require(vm, "vm");
    require(function, "function");
    require(result, "result");
    if (vm->busy.exchange(true, std::memory_order_acquire))
      throw kiln::Error("this VM is running on another thread; give each thread its own VM");
    struct Release {
      std::atomic<bool>& busy;
      ~Release() { busy.store(false, std::memory_order_release); }
    } release{vm->busy};
    std::vector<kiln::Value> in = valuesOf(args, num_args, "args");
    kiln::Value r = vm->vm->invoke(function, in);
    if (vm->resultsOnGpu) r = vm->vm->copyTo(r);
    *result = newValue(std::move(r));
  });
}

kiln_status* kiln_tensor_copy(kiln_dtype dtype, const int64_t* shape, size_t ndim, const void* data, size_t bytes,
                              kiln_value** out) {
  return guarded([&] {
    require(out, "out");
    kiln::DType dt = checkedDType(dtype);
    kiln::Shape s;
    uint64_t need = checkedShape(dt, shape, ndim, s);
    if (need != bytes)
      throw InvalidArgument{"a " + std::string(kiln::dtypeName(dt)) + " tensor of shape (" + kiln::shapeString(s) +
                            ") has " + std::to_string(need) + " bytes, not " + std::to_string(bytes)};
    if (bytes > 0) require(data, "data");
    kiln::Tensor t = kiln::Tensor::empty(dt, s);
    if (bytes > 0) std::memcpy(t.data(), data, bytes);
    *out = newValue(kiln::Value(std::move(t)));
  });
}

namespace {
// Calls the caller's release once, and only once the wrapped tensor exists:
// until armed, a failure part-way through leaves the memory the caller's.
struct CallerRelease {
  void (*fn)(void*);
  void* context;
  bool armed = false;
  void operator()(void*) const {
    if (armed && fn) fn(context);
  }
};
}  // namespace

kiln_status* kiln_tensor_wrap(kiln_dtype dtype, const int64_t* shape, size_t ndim, void* data, size_t bytes,
                              void (*release)(void* context), void* context, kiln_value** out) {
  return guarded([&] {
    require(out, "out");
    kiln::DType dt = checkedDType(dtype);
    kiln::Shape s;
    uint64_t need = checkedShape(dt, shape, ndim, s);
    if (bytes < need)
      throw InvalidArgument{"a " + std::string(kiln::dtypeName(dt)) + " tensor of shape (" + kiln::shapeString(s) +
                            ") needs " + std::to_string(need) + " bytes; " + std::to_string(bytes) + " given"};
    if (need > 0) {
      require(data, "data");
      if (reinterpret_cast<uintptr_t>(data) % 64 != 0 || bytes < 64)
        throw InvalidArgument{"wrapped memory must be 64-byte aligned with at least 64 bytes (kernels read whole vectors); "
                              "use kiln_tensor_copy"};
    }
    auto h = std::make_unique<kiln_value>();
    std::shared_ptr<void> owner(data, CallerRelease{release, context});
    h->value = kiln::Value(kiln::Tensor::view(dt, kiln::dims(s), owner));
    std::get_deleter<CallerRelease>(owner)->armed = true;
    *out = h.release();
  });
}

kiln_status* kiln_tensor_from_dlpack(DLManagedTensor* managed, kiln_value** out) {
  return guarded([&] {
    require(managed, "managed");
    require(out, "out");
    auto h = std::make_unique<kiln_value>();
    h->value = kiln::Value(kiln::fromDLPack(managed));
    *out = h.release();
  });
}

kiln_status* kiln_tensor_to_dlpack(const kiln_value* tensor, DLManagedTensor** out) {
  return guarded([&] {
    require(out, "out");
    *out = kiln::toDLPack(tensorOf(tensor));
  });
}

kiln_status* kiln_tensor_get_info(const kiln_value* tensor, kiln_tensor_info* out) {
  return guarded([&] {
    require(out, "out");
    const kiln::Tensor& t = tensorOf(tensor);
    kiln_tensor_info info{};
    info.dtype = static_cast<kiln_dtype>(t.dtype());
    info.ndim = t.rank();
    info.shape = t.shape().data();
    info.data = t.data();
    info.bytes = t.nbytes();
    bool gpu = t.device().kind == kiln::Device::Kind::CUDA;  // the emulated GPU's memory is host memory
    info.device = DLDevice{gpu ? kDLCUDA : kDLCPU, gpu ? t.device().index : 0};
    *out = info;
  });
}

kiln_status* kiln_tuple_create(kiln_value* const* fields, size_t num_fields, kiln_value** out) {
  return guarded([&] {
    require(out, "out");
    *out = newValue(kiln::Value::tuple(valuesOf(fields, num_fields, "fields")));
  });
}

kiln_status* kiln_adt_create(const kiln_executable* exe, const char* constructor, kiln_value* const* fields,
                             size_t num_fields, kiln_value** out) {
  return guarded([&] {
    require(exe, "executable");
    require(constructor, "constructor");
    require(out, "out");
    int64_t id = exe->exe->constructorId(constructor);
    if (id < 0) throw kiln::Error(std::string("the executable has no constructor named '") + constructor + "'");
    uint32_t arity = exe->exe->constructors()[static_cast<size_t>(id)].arity;
    if (arity != num_fields)
      throw InvalidArgument{std::string("constructor ") + constructor + " takes " + std::to_string(arity) + " field(s), not " +
                            std::to_string(num_fields)};
    *out = newValue(kiln::Value::adt(static_cast<uint32_t>(id), valuesOf(fields, num_fields, "fields")));
  });
}

kiln_value_kind kiln_value_kind_of(const kiln_value* value) {
  if (!value || value->value.empty()) return KILN_VALUE_EMPTY;
  const kiln::Value& v = value->value;
  if (v.isTensor()) return KILN_VALUE_TENSOR;
  if (v.isTuple()) return KILN_VALUE_TUPLE;
  if (v.isAdt()) return KILN_VALUE_ADT;
  if (v.isClosure()) return KILN_VALUE_CLOSURE;
  if (v.isRef()) return KILN_VALUE_REF;
  return KILN_VALUE_EMPTY;  // storage blocks never reach a program's result
}

size_t kiln_value_field_count(const kiln_value* value) {
  if (!value) return 0;
  const kiln::Value& v = value->value;
  if (v.isObject(kiln::ObjectKind::Adt)) return v.asAdt()->size;
  if (v.isClosure()) return v.asClosure()->size;
  if (v.isRef()) return 1;
  return 0;
}

kiln_status* kiln_value_field(const kiln_value* value, size_t index, kiln_value** out) {
  return guarded([&] {
    require(value, "value");
    require(out, "out");
    size_t n = kiln_value_field_count(value);
    if (index >= n)
      throw InvalidArgument{"field " + std::to_string(index) + " of " + value->value.describe() + " (it has " +
                            std::to_string(n) + ")"};
    const kiln::Value& v = value->value;
    if (v.isRef()) *out = newValue(v.asRef()->content);
    else if (v.isClosure()) *out = newValue(v.asClosure()->captured()[index]);
    else *out = newValue(v.asAdt()->fields()[index]);
  });
}

kiln_status* kiln_adt_constructor(const kiln_value* value, uint32_t* out) {
  return guarded([&] {
    require(value, "value");
    require(out, "out");
    if (!value->value.isAdt()) throw InvalidArgument{"value is " + value->value.describe() + ", not an ADT value"};
    *out = value->value.ctor();
  });
}

void kiln_value_release(kiln_value* value) { delete value; }

}  // extern "C"
