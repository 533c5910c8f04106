/* Kiln's C API: load executables, run them on VMs, pass tensors in and out.
 *
 * What other languages bind to (and what an app in C uses). It covers the
 * runtime side only: executables come from `kilnc -o` or the C++ compiler API.
 *
 * Objects and ownership. Every object is an opaque pointer made by a function
 * with an `out` parameter and released by its own `*_release` function (which
 * accepts NULL). Nothing is released behind the caller's back: a value returned
 * by kiln_vm_invoke or kiln_value_field is the caller's until released, and
 * stays valid after the VM or the executable is released (it holds what it
 * needs). An executable must outlive nothing: VMs hold a reference to it.
 *
 * Errors. Every function that can fail returns a `kiln_status*`: NULL for
 * success, otherwise an object carrying a code and a message (the message of the
 * kiln::Error, e.g. "error: argument 'x' of @main ...") that the caller releases
 * with kiln_status_release. On failure the `out` parameter is left untouched.
 * No function aborts the process or lets a C++ exception escape.
 *
 * Values. A kiln_value is a tensor (0-d tensors stand for scalars), a tuple, an
 * ADT value (a constructor of the executable and its fields), a closure, or a
 * reference cell. Tensors are compact row-major; their memory lives on the
 * device kiln_tensor_info names (results computed on a GPU are copied to the host
 * by kiln_vm_invoke, so results are always host memory).
 *
 * Threads. Executables, runtimes and values may be shared between threads (their
 * reference counts are atomic; values are immutable). A VM is used by one thread
 * at a time: give each thread its own VM over one shared executable.
 */
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_C_API_VERSION 1
/* The version of this header the library was built with (KILN_C_API_VERSION). */
int kiln_c_api_version(void);

/* ---- Errors ---- */
typedef enum kiln_status_code {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1, /* a null pointer, an unknown dtype, a value of the wrong kind, an index out of range */
  KILN_ERROR = 2,            /* a kiln::Error: bad input, a corrupt executable, a failure while running */
  KILN_OUT_OF_MEMORY = 3,    /* the machine (or a memory limit) has no room */
  KILN_INTERNAL = 4          /* any other failure inside Kiln */
} kiln_status_code;

typedef struct kiln_status kiln_status;
kiln_status_code kiln_status_code_of(const kiln_status* status); /* KILN_OK for NULL */
const char* kiln_status_message(const kiln_status* status);     /* "" for NULL; valid until released */
void kiln_status_release(kiln_status* status);

/* ---- Element types (the numbering of Kiln's executable format) ---- */
typedef enum kiln_dtype {
  KILN_FLOAT16 = 0,
  KILN_FLOAT32 = 1,
  KILN_FLOAT64 = 2,
  KILN_INT8 = 3,
  KILN_INT16 = 4,
  KILN_INT32 = 5,
  KILN_INT64 = 6,
  KILN_UINT8 = 7,
  KILN_BOOL = 8,
  KILN_UINT16 = 9
} kiln_dtype;
size_t kiln_dtype_size(kiln_dtype dtype); /* bytes per element; 0 for an unknown dtype */

/* ---- Executables ---- */
typedef struct kiln_executable kiln_executable;
/* Maps, checksums and verifies the file (a corrupt one is a KILN_ERROR). */
kiln_status* kiln_executable_load(const char* path, kiln_executable** out);
kiln_status* kiln_executable_load_bytes(const void* bytes, size_t size, kiln_executable** out); /* copies */
void kiln_executable_release(kiln_executable* exe);
size_t kiln_executable_function_count(const kiln_executable* exe);
const char* kiln_executable_function_name(const kiln_executable* exe, size_t index); /* NULL out of range */
/* The name of an ADT constructor id (kiln_adt_constructor); NULL out of range. */
const char* kiln_executable_constructor_name(const kiln_executable* exe, uint32_t constructor);

/* ---- Runtimes: kernel cache, thread pool, memory pools shared by VMs ---- */
typedef struct kiln_runtime kiln_runtime;
/* num_threads: threads for kernels' parallel loops (0: one per core; 1: none).
 * kernel_cache_dir: a directory for compiled kernels, or NULL for none. */
kiln_status* kiln_runtime_create(int num_threads, const char* kernel_cache_dir, kiln_runtime** out);
void kiln_runtime_release(kiln_runtime* runtime);

/* ---- Virtual machines ---- */
typedef struct kiln_vm kiln_vm;
typedef struct kiln_value kiln_value;
/* runtime: NULL for the process's default runtime (configured from the environment). */
kiln_status* kiln_vm_create(const kiln_executable* exe, kiln_runtime* runtime, kiln_vm** out);
/* As kiln_vm_create, each invoke limited to `time_limit_us` microseconds (0: no
 * limit; at most a year): past it, kiln_vm_invoke fails with KILN_ERROR at the
 * run's next call, loop step or fork ("time limit"), and the VM runs on. */
kiln_status* kiln_vm_create_with_time_limit(const kiln_executable* exe, kiln_runtime* runtime, uint64_t time_limit_us,
                                            kiln_vm** out);
/* Makes the kiln_vm_invoke running now on `vm` (on another thread: a watchdog, a
 * server's cancel) fail with KILN_ERROR at its next call, loop step or fork. A
 * request made while none runs is dropped when the next starts. Thread-safe;
 * NULL does nothing. */
void kiln_vm_request_stop(kiln_vm* vm);
void kiln_vm_release(kiln_vm* vm);
/* Calls `function` with `args` (checked against its parameter types; errors name
 * the parameter). The VM may be invoked again after a failure. */
kiln_status* kiln_vm_invoke(kiln_vm* vm, const char* function, kiln_value* const* args, size_t num_args,
                            kiln_value** result);

/* ---- Values ---- */
typedef enum kiln_value_kind {
  KILN_VALUE_TENSOR = 0,
  KILN_VALUE_TUPLE = 1,
  KILN_VALUE_ADT = 2,
  KILN_VALUE_CLOSURE = 3,
  KILN_VALUE_REF = 4,
  KILN_VALUE_EMPTY = 5
} kiln_value_kind;

/* A tensor holding a copy of `bytes` bytes at `data` (which must be exactly the
 * shape's element count times the dtype's size). */
kiln_status* kiln_tensor_copy(kiln_dtype dtype, const int64_t* shape, size_t ndim, const void* data, size_t bytes,
                              kiln_value** out);
/* A tensor over the caller's memory, without a copy: `data` must be 64-byte
 * aligned with at least max(64, bytes) bytes readable. `release(context)` is
 * called once when Kiln no longer uses the memory (on any thread); on failure it
 * is not called and the memory stays the caller's. */
kiln_status* kiln_tensor_wrap(kiln_dtype dtype, const int64_t* shape, size_t ndim, void* data, size_t bytes,
                              void (*release)(void* context), void* context, kiln_value** out);
/* DLPack: consumes `managed` on success (its deleter runs when Kiln is done with
 * it: at once when the memory had to be copied); see kiln/dlpack.h. */
kiln_status* kiln_tensor_from_dlpack(DLManagedTensor* managed, kiln_value** out);
/* A DLPack view of a tensor value's memory (no copy); the caller calls its deleter. */
kiln_status* kiln_tensor_to_dlpack(const kiln_value* tensor, DLManagedTensor** out);

typedef struct kiln_tensor_info {
  kiln_dtype dtype;
  size_t ndim;
  const int64_t* shape; /* ndim extents, valid while the value lives */
  void* data;           /* compact row-major; valid while the value lives */
  size_t bytes;
  DLDevice device;      /* kDLCPU, or kDLCUDA with its index */
} kiln_tensor_info;
kiln_status* kiln_tensor_get_info(const kiln_value* tensor, kiln_tensor_info* out);

/* Tuples and ADT values built from fields (which stay the caller's to release). */
kiln_status* kiln_tuple_create(kiln_value* const* fields, size_t num_fields, kiln_value** out);
/* `constructor` by name (e.g. "Cons", "Nil"); the field count must match. */
kiln_status* kiln_adt_create(const kiln_executable* exe, const char* constructor, kiln_value* const* fields,
                             size_t num_fields, kiln_value** out);

kiln_value_kind kiln_value_kind_of(const kiln_value* value); /* KILN_VALUE_EMPTY for NULL */
/* Fields of a tuple or ADT value, captured values of a closure, 1 for a
 * reference cell (its content); 0 otherwise. */
size_t kiln_value_field_count(const kiln_value* value);
kiln_status* kiln_value_field(const kiln_value* value, size_t index, kiln_value** out);
/* The constructor id of an ADT value (names: kiln_executable_constructor_name). */
kiln_status* kiln_adt_constructor(const kiln_value* value, uint32_t* out);
void kiln_value_release(kiln_value* value);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_KILN_H_ */
