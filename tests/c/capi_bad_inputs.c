/*
 * Bad inputs to every function of the value and function API: each returns its documented
 * status, with the matching error kind and a message that names what was wrong, and writes
 * nothing to its output.
 */
#include "check.h"

static int32_t returns_int(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  result->type_index = kDVMInt;
  result->v_int64 = 1;
  return 0;
}

/* Breaks the convention: a borrowed DLTensor* cannot be an owned result. */
static DLTensor some_dl;
static int32_t returns_borrowed(void* self, const DVMAny* args, int32_t num_args,
                                DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  result->type_index = kDVMDLTensorPtr;
  result->v_ptr = &some_dl;
  return 0;
}

static int dlpack_deleted;
static void count_dlpack_delete(DLManagedTensorVersioned* self) {
  (void)self;
  dlpack_deleted++;
}

static DVMAny any_of(int32_t type_index) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  v.type_index = type_index;
  return v;
}

/* A value that must stay as it is when a call fails. */
static DVMAny sentinel(void) {
  DVMAny v = any_of(kDVMInt);
  v.v_int64 = 0x5e5e5e5e;
  return v;
}

static int is_sentinel(const DVMAny* v) {
  return v->type_index == kDVMInt && v->v_int64 == 0x5e5e5e5e;
}

int main(void) {
  /* No call on this thread has failed yet. */
  CHECK(dvm_last_error_kind() == NULL);
  CHECK(dvm_last_error_message() == NULL);

  dvm_func* f;
  CHECK_OK(dvm_func_new(NULL, returns_int, NULL, &f));
  dvm_tensor* tensor;
  const int64_t four[1] = {4};
  const DLDataType f32 = {kDLFloat, 32, 1};
  const DLDevice cpu = {kDLCPU, 0};
  CHECK_OK(dvm_tensor_empty(four, 1, f32, cpu, &tensor));

  DVMAny result = sentinel();
  DVMAny out = sentinel();
  dvm_func* out_func = (dvm_func*)&out; /* any non-NULL value, to see it is not overwritten */
  dvm_tensor* out_tensor = (dvm_tensor*)&out;
  DLManagedTensorVersioned* out_managed = (DLManagedTensorVersioned*)&out;
  DVMAny args[2] = {any_of(kDVMInt), any_of(kDVMInt)};

  /* ---- dvm_func_new ---- */
  EXPECT_STATUS(dvm_func_new(NULL, NULL, NULL, &out_func), DVM_VALUE_ERROR, "`call` is NULL");
  EXPECT_STATUS(dvm_func_new(NULL, returns_int, NULL, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  CHECK(out_func == (dvm_func*)&out);

  /* ---- dvm_func_call ---- */
  EXPECT_STATUS(dvm_func_call(NULL, args, 1, &result), DVM_VALUE_ERROR, "`f` is NULL");
  EXPECT_STATUS(dvm_func_call(f, args, 1, NULL), DVM_VALUE_ERROR, "`result` is NULL");
  EXPECT_STATUS(dvm_func_call((dvm_func*)tensor, args, 1, &result), DVM_TYPE_ERROR,
                "`f` is not a function (it is ffi.Tensor)");
  EXPECT_STATUS(dvm_func_call(f, args, -1, &result), DVM_VALUE_ERROR,
                "`num_args` is negative (-1)");
  EXPECT_STATUS(dvm_func_call(f, NULL, 2, &result), DVM_VALUE_ERROR, "`args` is NULL");
  args[0].type_index = 42;
  EXPECT_STATUS(dvm_func_call(f, args, 2, &result), DVM_TYPE_ERROR,
                "`args[0]`: unknown type index 42");
  args[0] = any_of(kDVMInt);
  args[1].type_index = -7;
  EXPECT_STATUS(dvm_func_call(f, args, 2, &result), DVM_TYPE_ERROR,
                "`args[1]`: unknown type index -7");
  args[1] = any_of(kDVMStr); /* an object index with a NULL v_obj */
  EXPECT_STATUS(dvm_func_call(f, args, 2, &result), DVM_VALUE_ERROR,
                "`args[1]`: a ffi.String value holds a NULL object pointer");
  args[1] = any_of(kDVMInt);
  CHECK(is_sentinel(&result)); /* no failure above wrote the result */

  dvm_func* borrowed_result;
  CHECK_OK(dvm_func_new(NULL, returns_borrowed, NULL, &borrowed_result));
  EXPECT_STATUS(dvm_func_call(borrowed_result, NULL, 0, &result), DVM_TYPE_ERROR,
                "cannot be an owned value");
  CHECK(is_sentinel(&result));
  dvm_func_free(borrowed_result);

  /* A valid call still works after all that. */
  CHECK_OK(dvm_func_call(f, args, 2, &result));
  CHECK(result.type_index == kDVMInt && result.v_int64 == 1);

  /* ---- the global registry ---- */
  EXPECT_STATUS(dvm_func_get_global("test.bad.no_such_function", &out_func), DVM_KEY_ERROR,
                "no global function has the name `test.bad.no_such_function`");
  EXPECT_STATUS(dvm_func_get_global(NULL, &out_func), DVM_VALUE_ERROR, "`name` is NULL");
  EXPECT_STATUS(dvm_func_get_global("test.bad.f", NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_func_get_global("bad \xff name", &out_func), DVM_VALUE_ERROR,
                "`name` is not valid UTF-8");
  CHECK(out_func == (dvm_func*)&out);

  CHECK_OK(dvm_func_register_global("test.bad.f", f, 0));
  EXPECT_STATUS(dvm_func_register_global("test.bad.f", f, 0), DVM_VALUE_ERROR,
                "global function `test.bad.f` is already registered");
  CHECK_OK(dvm_func_register_global("test.bad.f", f, 1)); /* allowed with allow_override */
  EXPECT_STATUS(dvm_func_register_global("", f, 0), DVM_VALUE_ERROR, "non-empty name");
  EXPECT_STATUS(dvm_func_register_global(NULL, f, 0), DVM_VALUE_ERROR, "`name` is NULL");
  EXPECT_STATUS(dvm_func_register_global("test.bad.g", NULL, 0), DVM_VALUE_ERROR,
                "`f` is NULL");
  EXPECT_STATUS(dvm_func_register_global("test.bad.g", (dvm_func*)tensor, 0), DVM_TYPE_ERROR,
                "`f` is not a function (it is ffi.Tensor)");
  EXPECT_STATUS(dvm_func_get_global("test.bad.g", &out_func), DVM_KEY_ERROR, "test.bad.g");
  CHECK_OK(dvm_func_remove_global("test.bad.f"));
  EXPECT_STATUS(dvm_func_remove_global("test.bad.f"), DVM_KEY_ERROR,
                "no global function has the name `test.bad.f`");
  EXPECT_STATUS(dvm_func_remove_global(NULL), DVM_VALUE_ERROR, "`name` is NULL");
  EXPECT_STATUS(dvm_func_list_global_names(NULL), DVM_VALUE_ERROR, "`out` is NULL");

  /* ---- values and objects ---- */
  EXPECT_STATUS(dvm_string_new(NULL, 3, &out), DVM_VALUE_ERROR, "`data` is NULL");
  EXPECT_STATUS(dvm_string_new("abc", 3, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_bytes_new(NULL, 3, &out), DVM_VALUE_ERROR, "`data` is NULL");
  EXPECT_STATUS(dvm_bytes_new("abc", 3, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_shape_new(NULL, 2, &out), DVM_VALUE_ERROR, "`dims` is NULL");
  EXPECT_STATUS(dvm_shape_new(four, -1, &out), DVM_VALUE_ERROR, "`ndim` is negative (-1)");
  EXPECT_STATUS(dvm_shape_new(four, 1, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_object_inc_ref(NULL), DVM_VALUE_ERROR, "`obj` is NULL");
  EXPECT_STATUS(dvm_object_dec_ref(NULL), DVM_VALUE_ERROR, "`obj` is NULL");
  EXPECT_STATUS(dvm_any_release(NULL), DVM_VALUE_ERROR, "`value` is NULL");
  CHECK(is_sentinel(&out));

  /* An empty string needs no data. */
  CHECK_OK(dvm_string_new(NULL, 0, &out));
  CHECK(out.type_index == kDVMSmallStr && out.small_str_len == 0);
  CHECK_OK(dvm_any_release(&out));
  CHECK(out.type_index == kDVMNone);

  /* ---- tensors ---- */
  const int64_t negative[2] = {2, -3};
  EXPECT_STATUS(dvm_tensor_empty(negative, 2, f32, cpu, &out_tensor), DVM_VALUE_ERROR,
                "dimension 1 of shape [2, -3] is negative");
  EXPECT_STATUS(dvm_tensor_empty(four, -1, f32, cpu, &out_tensor), DVM_VALUE_ERROR,
                "`ndim` is negative (-1)");
  const int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  EXPECT_STATUS(dvm_tensor_empty(huge, 2, f32, cpu, &out_tensor), DVM_VALUE_ERROR,
                "is too large to address");
  const int64_t big[1] = {INT64_MAX};
  EXPECT_STATUS(dvm_tensor_empty(big, 1, f32, cpu, &out_tensor), DVM_VALUE_ERROR,
                "is too large to address");
  EXPECT_STATUS(dvm_tensor_empty(four, 1, (DLDataType){99, 32, 1}, cpu, &out_tensor),
                DVM_VALUE_ERROR, "invalid dtype (code 99, bits 32, lanes 1)");
  EXPECT_STATUS(dvm_tensor_empty(four, 1, (DLDataType){kDLFloat, 0, 1}, cpu, &out_tensor),
                DVM_VALUE_ERROR, "invalid dtype (code 2, bits 0, lanes 1)");
  EXPECT_STATUS(dvm_tensor_empty(four, 1, (DLDataType){kDLInt, 8, 0}, cpu, &out_tensor),
                DVM_VALUE_ERROR, "invalid dtype (code 0, bits 8, lanes 0)");
  EXPECT_STATUS(dvm_tensor_empty(four, 1, f32, (DLDevice){kDLCUDA, 1000}, &out_tensor),
                DVM_DEVICE_UNAVAILABLE, "CUDA device 1000: ");
  EXPECT_STATUS(dvm_tensor_empty(NULL, 2, f32, cpu, &out_tensor), DVM_VALUE_ERROR,
                "`shape` is NULL");
  EXPECT_STATUS(dvm_tensor_empty(four, 1, f32, cpu, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  CHECK(out_tensor == (dvm_tensor*)&out);

  CHECK(dvm_tensor_dl(NULL) == NULL);
  EXPECT_ERROR("ValueError", "`t` is NULL");
  CHECK(dvm_tensor_dl((dvm_tensor*)f) == NULL);
  EXPECT_ERROR("TypeError", "`t` is not a tensor (it is ffi.Function)");

  EXPECT_STATUS(dvm_tensor_to_dlpack(NULL, &out_managed), DVM_VALUE_ERROR, "`t` is NULL");
  EXPECT_STATUS(dvm_tensor_to_dlpack(tensor, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_tensor_to_dlpack((dvm_tensor*)f, &out_managed), DVM_TYPE_ERROR,
                "`t` is not a tensor (it is ffi.Function)");
  CHECK(out_managed == (DLManagedTensorVersioned*)&out);

  /* dvm_tensor_from_dlpack: on failure the caller keeps the managed tensor (no deleter call). */
  float data[4] = {0};
  int64_t shape[2] = {2, 2};
  DLManagedTensorVersioned managed = {
      .version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
      .manager_ctx = NULL,
      .deleter = count_dlpack_delete,
      .flags = 0,
      .dl_tensor = {.data = data, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1},
                    .shape = shape, .strides = NULL, .byte_offset = 0},
  };
  EXPECT_STATUS(dvm_tensor_from_dlpack(NULL, &out_tensor), DVM_VALUE_ERROR,
                "`managed` is NULL");
  EXPECT_STATUS(dvm_tensor_from_dlpack(&managed, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  managed.version.major = 2;
  EXPECT_STATUS(dvm_tensor_from_dlpack(&managed, &out_tensor), DVM_VALUE_ERROR,
                "DLPack major version 2 is not supported");
  managed.version.major = DLPACK_MAJOR_VERSION;
  shape[1] = -2;
  EXPECT_STATUS(dvm_tensor_from_dlpack(&managed, &out_tensor), DVM_VALUE_ERROR,
                "dimension 1 of shape [2, -2] is negative");
  shape[1] = 2;
  managed.dl_tensor.data = NULL;
  EXPECT_STATUS(dvm_tensor_from_dlpack(&managed, &out_tensor), DVM_VALUE_ERROR,
                "data is NULL for a tensor of shape [2, 2]");
  managed.dl_tensor.data = data;
  managed.dl_tensor.ndim = -1;
  EXPECT_STATUS(dvm_tensor_from_dlpack(&managed, &out_tensor), DVM_VALUE_ERROR,
                "ndim -1 is out of range");
  CHECK(out_tensor == (dvm_tensor*)&out);
  CHECK(dlpack_deleted == 0);

  /* NULL is fine for the _free functions. */
  dvm_func_free(NULL);
  dvm_tensor_free(NULL);

  dvm_tensor_free(tensor);
  dvm_func_free(f);
  return check_finish();
}
