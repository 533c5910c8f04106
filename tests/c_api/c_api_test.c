/* The C API from C: load an executable, invoke with tensors from caller memory
 * (copied, wrapped and through DLPack), read tuples, tensors and ADT values,
 * and every error as a status with a message. Run by ctest with the path of an
 * executable compiled from lists.relay. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

static int failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)
/* A call that must succeed: on failure, print its message and stop. */
#define OK(call)                                                                  \
  do {                                                                            \
    kiln_status* s_ = (call);                                                     \
    if (s_) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, kiln_status_message(s_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)
/* A call that must fail with `code` and a message containing `text`. */
static void expect_error(kiln_status* s, kiln_status_code code, const char* text, int line) {
  if (!s) {
    fprintf(stderr, "line %d: expected an error\n", line);
    ++failures;
    return;
  }
  if (kiln_status_code_of(s) != code || !strstr(kiln_status_message(s), text)) {
    fprintf(stderr, "line %d: got code %d, message '%s'; expected code %d with '%s'\n", line,
            (int)kiln_status_code_of(s), kiln_status_message(s), (int)code, text);
    ++failures;
  }
  kiln_status_release(s);
}
#define EXPECT_ERROR(call, code, text) expect_error((call), (code), (text), __LINE__)

static int released = 0;
static void count_release(void* context) { released += *(int*)context; }

static void dl_deleter(DLManagedTensor* m) {
  ++released;
  free(m);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_api_test LISTS_EXECUTABLE\n");
    return 2;
  }
  CHECK(kiln_c_api_version() == KILN_C_API_VERSION);
  CHECK(kiln_dtype_size(KILN_FLOAT16) == 2 && kiln_dtype_size(KILN_INT64) == 8 && kiln_dtype_size((kiln_dtype)99) == 0);

  kiln_executable* exe = NULL;
  EXPECT_ERROR(kiln_executable_load("/nonexistent/x.kx", &exe), KILN_ERROR, "cannot open");
  CHECK(exe == NULL);
  EXPECT_ERROR(kiln_executable_load_bytes("garbage!", 8, &exe), KILN_ERROR, "not a Kiln executable");
  EXPECT_ERROR(kiln_executable_load(NULL, &exe), KILN_INVALID_ARGUMENT, "path is null");
  OK(kiln_executable_load(argv[1], &exe));
  int found_main = 0;
  for (size_t i = 0; i < kiln_executable_function_count(exe); ++i)
    found_main |= strcmp(kiln_executable_function_name(exe, i), "main") == 0;
  CHECK(found_main);
  CHECK(kiln_executable_function_name(exe, 100000) == NULL);

  kiln_runtime* runtime = NULL;
  OK(kiln_runtime_create(1, NULL, &runtime));
  kiln_vm* vm = NULL;
  OK(kiln_vm_create(exe, runtime, &vm));

  /* main(x: 2x3, y: 3) = (x + y, sum(x)); x copied from the stack, y wrapped. */
  float xs[6] = {1, 2, 3, 4, 5, 6};
  int64_t xshape[2] = {2, 3}, yshape[1] = {3};
  kiln_value* x = NULL;
  OK(kiln_tensor_copy(KILN_FLOAT32, xshape, 2, xs, sizeof xs, &x));
  EXPECT_ERROR(kiln_tensor_copy(KILN_FLOAT32, xshape, 2, xs, 20, &x), KILN_INVALID_ARGUMENT, "has 24 bytes, not 20");
  int64_t huge[3] = {1 << 30, 1 << 30, 1 << 30};
  EXPECT_ERROR(kiln_tensor_copy(KILN_FLOAT32, huge, 3, xs, sizeof xs, &x), KILN_OUT_OF_MEMORY, "larger than any device");
  int64_t negative[1] = {-3};
  EXPECT_ERROR(kiln_tensor_copy(KILN_FLOAT32, negative, 1, xs, 0, &x), KILN_INVALID_ARGUMENT, "negative extent");
  EXPECT_ERROR(kiln_tensor_copy((kiln_dtype)42, xshape, 2, xs, sizeof xs, &x), KILN_INVALID_ARGUMENT, "unknown dtype");

  float* ymem = aligned_alloc(64, 64);
  ymem[0] = 10, ymem[1] = 20, ymem[2] = 30;
  kiln_value* y = NULL;
  int weight = 1;
  EXPECT_ERROR(kiln_tensor_wrap(KILN_FLOAT32, yshape, 1, ymem + 1, 60, count_release, &weight, &y), KILN_INVALID_ARGUMENT,
               "64-byte aligned");
  CHECK(released == 0); /* a failed wrap leaves the memory the caller's */
  OK(kiln_tensor_wrap(KILN_FLOAT32, yshape, 1, ymem, 64, count_release, &weight, &y));

  kiln_value* args[2] = {x, y};
  kiln_value* result = NULL;
  OK(kiln_vm_invoke(vm, "main", args, 2, &result));
  CHECK(kiln_value_kind_of(result) == KILN_VALUE_TUPLE);
  CHECK(kiln_value_field_count(result) == 2);
  kiln_value* sum = NULL;
  kiln_value* total = NULL;
  OK(kiln_value_field(result, 0, &sum));
  OK(kiln_value_field(result, 1, &total));
  EXPECT_ERROR(kiln_value_field(result, 2, &total), KILN_INVALID_ARGUMENT, "field 2");
  kiln_tensor_info info;
  OK(kiln_tensor_get_info(sum, &info));
  CHECK(info.dtype == KILN_FLOAT32 && info.ndim == 2 && info.shape[0] == 2 && info.shape[1] == 3 && info.bytes == 24);
  CHECK(info.device.device_type == kDLCPU);
  const float* s = info.data;
  CHECK(s[0] == 11 && s[1] == 22 && s[2] == 33 && s[3] == 14 && s[4] == 25 && s[5] == 36);
  OK(kiln_tensor_get_info(total, &info)); /* a scalar result is a 0-d tensor */
  CHECK(info.ndim == 0 && info.bytes == 4 && *(const float*)info.data == 21);
  EXPECT_ERROR(kiln_tensor_get_info(result, &info), KILN_INVALID_ARGUMENT, "not a tensor");

  /* Errors from invoke: wrong shape (names the parameter), wrong count, unknown function. */
  kiln_value* wrong[2] = {y, y};
  kiln_value* none = NULL;
  EXPECT_ERROR(kiln_vm_invoke(vm, "main", wrong, 2, &none), KILN_ERROR, "argument 'x' of @main");
  EXPECT_ERROR(kiln_vm_invoke(vm, "main", args, 1, &none), KILN_ERROR, "");
  EXPECT_ERROR(kiln_vm_invoke(vm, "no_such_function", args, 2, &none), KILN_ERROR, "no_such_function");
  kiln_value* with_null[2] = {x, NULL};
  EXPECT_ERROR(kiln_vm_invoke(vm, "main", with_null, 2, &none), KILN_INVALID_ARGUMENT, "args[1] is null");
  CHECK(none == NULL);
  /* The VM still works after errors. */
  kiln_value* again = NULL;
  OK(kiln_vm_invoke(vm, "main", args, 2, &again));
  kiln_value_release(again);

  /* ADT values out: countdown(3) = Cons(3, Cons(2, Cons(1, Nil))). */
  int32_t three = 3;
  kiln_value* n = NULL;
  OK(kiln_tensor_copy(KILN_INT32, NULL, 0, &three, 4, &n));
  kiln_value* list = NULL;
  OK(kiln_vm_invoke(vm, "countdown", &n, 1, &list));
  float expected = 3;
  kiln_value* cell = list;
  for (;;) {
    CHECK(kiln_value_kind_of(cell) == KILN_VALUE_ADT);
    uint32_t ctor = 0;
    OK(kiln_adt_constructor(cell, &ctor));
    const char* name = kiln_executable_constructor_name(exe, ctor);
    if (strcmp(name, "Nil") == 0) break;
    CHECK(strcmp(name, "Cons") == 0 && kiln_value_field_count(cell) == 2);
    kiln_value* head = NULL;
    kiln_value* tail = NULL;
    OK(kiln_value_field(cell, 0, &head));
    OK(kiln_value_field(cell, 1, &tail));
    OK(kiln_tensor_get_info(head, &info));
    CHECK(*(const float*)info.data == expected);
    expected -= 1;
    kiln_value_release(head);
    if (cell != list) kiln_value_release(cell);
    cell = tail;
  }
  CHECK(expected == 0);
  if (cell != list) kiln_value_release(cell);

  /* ADT values in: total(Cons(1.5, Cons(2.5, Nil))) through DLPack-imported scalars. */
  kiln_value* nil = NULL;
  OK(kiln_adt_create(exe, "Nil", NULL, 0, &nil));
  EXPECT_ERROR(kiln_adt_create(exe, "Cons", &nil, 1, &none), KILN_INVALID_ARGUMENT, "takes 2 field(s), not 1");
  EXPECT_ERROR(kiln_adt_create(exe, "Leaf", NULL, 0, &none), KILN_ERROR, "no constructor named 'Leaf'");
  kiln_value* items[2];
  float values[2] = {1.5f, 2.5f};
  for (int i = 0; i < 2; ++i) {
    DLManagedTensor* m = calloc(1, sizeof(DLManagedTensor) + 64);
    float* data = (float*)(m + 1);
    *data = values[i];
    m->dl_tensor.data = data;
    m->dl_tensor.device.device_type = kDLCPU;
    m->dl_tensor.ndim = 0;
    m->dl_tensor.dtype.code = kDLFloat;
    m->dl_tensor.dtype.bits = 32;
    m->dl_tensor.dtype.lanes = 1;
    m->deleter = dl_deleter;
    OK(kiln_tensor_from_dlpack(m, &items[i])); /* 4 bytes: copied, deleter called now */
  }
  CHECK(released == 2);
  kiln_value* l1 = NULL;
  kiln_value* l2 = NULL;
  kiln_value* f1[2] = {items[1], nil};
  OK(kiln_adt_create(exe, "Cons", f1, 2, &l1));
  kiln_value* f2[2] = {items[0], l1};
  OK(kiln_adt_create(exe, "Cons", f2, 2, &l2));
  kiln_value* t = NULL;
  OK(kiln_vm_invoke(vm, "total", &l2, 1, &t));
  OK(kiln_tensor_get_info(t, &info));
  CHECK(*(const float*)info.data == 4.0f);

  /* DLPack out: a view of the result's memory; the caller's deleter call releases it. */
  DLManagedTensor* out = NULL;
  OK(kiln_tensor_to_dlpack(sum, &out));
  CHECK(out->dl_tensor.ndim == 2 && out->dl_tensor.shape[1] == 3 && out->dl_tensor.dtype.code == kDLFloat &&
        out->dl_tensor.strides == NULL && ((const float*)out->dl_tensor.data)[5] == 36);
  kiln_value_release(sum);
  CHECK(((const float*)out->dl_tensor.data)[5] == 36); /* still alive: the DLPack tensor holds it */
  out->deleter(out);

  /* A time limit ends an endless loop with an error, and the VM runs on; a stop
   * requested while nothing runs is dropped when the next invoke starts. */
  kiln_vm* limited = NULL;
  EXPECT_ERROR(kiln_vm_create_with_time_limit(exe, runtime, (uint64_t)1 << 62, &limited), KILN_INVALID_ARGUMENT,
               "more than a year");
  OK(kiln_vm_create_with_time_limit(exe, runtime, 50000, &limited));
  int64_t zero = 0;
  kiln_value* start = NULL;
  OK(kiln_tensor_copy(KILN_INT64, NULL, 0, &zero, 8, &start));
  kiln_value* never = NULL;
  EXPECT_ERROR(kiln_vm_invoke(limited, "spin", &start, 1, &never), KILN_ERROR,
               "in @spin: the run took longer than its time limit");
  CHECK(never == NULL);
  kiln_vm_request_stop(limited);
  kiln_vm_request_stop(NULL);
  kiln_value* counted = NULL;
  OK(kiln_vm_invoke(limited, "countdown", &n, 1, &counted));
  CHECK(kiln_value_kind_of(counted) == KILN_VALUE_ADT);
  kiln_value_release(counted);
  kiln_value_release(start);
  kiln_vm_release(limited);

  kiln_value* vals[] = {t, l1, l2, items[0], items[1], nil, n, list, total, result, x};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) kiln_value_release(vals[i]);
  int before = released;
  kiln_value_release(y); /* the last reference to the wrapped memory */
  CHECK(released == before + 1);
  free(ymem);
  kiln_vm_release(vm);
  kiln_runtime_release(runtime);
  kiln_executable_release(exe);
  kiln_value_release(NULL);
  kiln_status_release(NULL);
  CHECK(kiln_status_code_of(NULL) == KILN_OK);

  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("ok: C API\n");
  return 0;
}
