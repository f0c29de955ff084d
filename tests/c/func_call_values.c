/*
 * A C callback registered as a global function, looked up again and called through
 * dvm_func_call with every kind of argument: Int, Float, Bool, SmallStr, Str, Shape, DataType,
 * Device, a borrowed DLTensor* and a Tensor object. The callbacks read each value the way
 * tvm-ffi code would (type_index, then the payload or the object's cell after its header) and
 * return values the caller checks.
 */
#include "values.h"

/* ---- Reading values, as a callee does ------------------------------------------------------ */

/* The characters of any string form a caller may pass: RawStr, SmallStr or Str. */
static int string_view(const DVMAny* v, const char** data, size_t* size) {
  switch (v->type_index) {
    case kDVMRawStr:
      *data = v->v_c_str;
      *size = strlen(v->v_c_str);
      return 1;
    case kDVMSmallStr:
      *data = v->v_bytes;
      *size = v->small_str_len;
      return 1;
    case kDVMStr:
      *data = CELL(DVMByteArray, v->v_obj)->data;
      *size = CELL(DVMByteArray, v->v_obj)->size;
      return 1;
    default:
      return 0;
  }
}

/* The DLTensor of either tensor form: a borrowed DLTensor* or a Tensor object. */
static const DLTensor* tensor_view(const DVMAny* v) {
  if (v->type_index == kDVMDLTensorPtr) return (const DLTensor*)v->v_ptr;
  if (v->type_index == kDVMTensor) return CELL(DLTensor, v->v_obj);
  return NULL;
}

static int text_equals(const DVMAny* v, const char* expected) {
  const char* data;
  size_t size;
  return string_view(v, &data, &size) && size == strlen(expected) &&
         memcmp(data, expected, size) == 0;
}

/* ---- The callbacks ------------------------------------------------------------------------- */

/* Raises a ValueError naming the check that failed. */
#define REQUIRE(cond)                                                        \
  do {                                                                       \
    if (!(cond)) {                                                           \
      dvm_error_raise("ValueError", "callback check failed: " #cond);       \
      return -1;                                                             \
    }                                                                        \
  } while (0)

enum {
  ARG_INT,
  ARG_FLOAT,
  ARG_BOOL,
  ARG_SMALL_STR,
  ARG_STR,
  ARG_SHAPE,
  ARG_DTYPE,
  ARG_DEVICE,
  ARG_DLTENSOR,
  ARG_TENSOR,
  NUM_ARGS
};

static const char kLongText[] = "a string longer than seven bytes";

/* Checks one argument of each kind; returns how many it checked. */
static int32_t inspect(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  REQUIRE(self != NULL && *(const int*)self == 1234);
  REQUIRE(num_args == NUM_ARGS);
  REQUIRE(result->type_index == kDVMNone); /* the caller sets the result to None */

  REQUIRE(args[ARG_INT].type_index == kDVMInt && args[ARG_INT].v_int64 == -42);
  REQUIRE(args[ARG_FLOAT].type_index == kDVMFloat && args[ARG_FLOAT].v_float64 == 2.5);
  REQUIRE(args[ARG_BOOL].type_index == kDVMBool && args[ARG_BOOL].v_int64 == 1);

  REQUIRE(args[ARG_SMALL_STR].type_index == kDVMSmallStr);
  REQUIRE(args[ARG_SMALL_STR].small_str_len == 2);
  REQUIRE(memcmp(args[ARG_SMALL_STR].v_bytes, "hi\0\0\0\0\0\0", 8) == 0);

  REQUIRE(args[ARG_STR].type_index == kDVMStr);
  const DVMByteArray* text = CELL(DVMByteArray, args[ARG_STR].v_obj);
  REQUIRE(text->size == strlen(kLongText) && memcmp(text->data, kLongText, text->size) == 0);
  REQUIRE(text->data[text->size] == '\0');

  REQUIRE(args[ARG_SHAPE].type_index == kDVMShape);
  const DVMShapeCell* shape = CELL(DVMShapeCell, args[ARG_SHAPE].v_obj);
  REQUIRE(shape->size == 3);
  REQUIRE(shape->data[0] == 2 && shape->data[1] == 3 && shape->data[2] == 4);

  REQUIRE(args[ARG_DTYPE].type_index == kDVMDataType);
  REQUIRE(args[ARG_DTYPE].v_dtype.code == kDLFloat && args[ARG_DTYPE].v_dtype.bits == 16 &&
          args[ARG_DTYPE].v_dtype.lanes == 4);

  REQUIRE(args[ARG_DEVICE].type_index == kDVMDevice);
  REQUIRE(args[ARG_DEVICE].v_device.device_type == kDLCUDA &&
          args[ARG_DEVICE].v_device.device_id == 3);

  REQUIRE(args[ARG_DLTENSOR].type_index == kDVMDLTensorPtr);
  const DLTensor* borrowed = (const DLTensor*)args[ARG_DLTENSOR].v_ptr;
  REQUIRE(borrowed->ndim == 2 && borrowed->shape[0] == 2 && borrowed->shape[1] == 3);
  REQUIRE(borrowed->dtype.code == kDLFloat && borrowed->dtype.bits == 32);
  REQUIRE(((const float*)borrowed->data)[5] == 6.0f);

  REQUIRE(args[ARG_TENSOR].type_index == kDVMTensor);
  const DLTensor* owned = CELL(DLTensor, args[ARG_TENSOR].v_obj);
  REQUIRE(owned->ndim == 1 && owned->shape[0] == 4);
  REQUIRE(owned->dtype.code == kDLInt && owned->dtype.bits == 32 && owned->dtype.lanes == 1);
  REQUIRE(owned->device.device_type == kDLCPU);
  REQUIRE(((uintptr_t)owned->data % 64) == 0);
  REQUIRE(((const int32_t*)owned->data)[3] == 30);

  result->type_index = kDVMInt;
  result->v_int64 = num_args;
  return 0;
}

/* Returns its argument. An object result is owned by the caller: take a reference for it. */
static int32_t echo(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  REQUIRE(num_args == 1);
  REQUIRE(args[0].type_index != kDVMDLTensorPtr && args[0].type_index != kDVMRawStr);
  if (args[0].type_index >= kDVMStaticObjectBegin && dvm_object_inc_ref(args[0].v_obj) != DVM_OK) {
    return -1; /* dvm_object_inc_ref raised the error */
  }
  *result = args[0];
  return 0;
}

/* scale(tensor, factor): a new float32 tensor holding tensor * factor. The tensor may come as a
 * DLTensor* or as a Tensor object; the factor as a Float or an Int. */
static int32_t scale(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  REQUIRE(num_args == 2);
  const DLTensor* in = tensor_view(&args[0]);
  REQUIRE(in != NULL);
  REQUIRE(in->dtype.code == kDLFloat && in->dtype.bits == 32 && in->dtype.lanes == 1);
  REQUIRE(in->strides == NULL || in->ndim <= 1 || in->strides[in->ndim - 1] == 1);
  double factor;
  if (args[1].type_index == kDVMFloat) {
    factor = args[1].v_float64;
  } else {
    REQUIRE(args[1].type_index == kDVMInt);
    factor = (double)args[1].v_int64;
  }
  dvm_tensor* out;
  if (dvm_tensor_empty(in->shape, in->ndim, in->dtype, in->device, &out) != DVM_OK) return -1;
  int64_t count = 1;
  for (int32_t i = 0; i < in->ndim; i++) count *= in->shape[i];
  const float* src = (const float*)((const char*)in->data + in->byte_offset);
  float* dst = (float*)dvm_tensor_dl(out)->data;
  for (int64_t i = 0; i < count; i++) dst[i] = (float)(src[i] * factor);
  *result = any_object(out); /* our reference moves into the result */
  return 0;
}

/* greet(name): "hi <name>", made with dvm_string_new (small or heap form by length). */
static int32_t greet(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  REQUIRE(num_args == 1);
  const char* name;
  size_t size;
  REQUIRE(string_view(&args[0], &name, &size));
  char text[128];
  REQUIRE(size < sizeof text - 3);
  memcpy(text, "hi ", 3);
  memcpy(text + 3, name, size);
  return dvm_string_new(text, size + 3, result) == DVM_OK ? 0 : -1;
}

/* ---- The test ------------------------------------------------------------------------------ */

static int deleted;
static void count_delete(void* self) {
  (void)self;
  deleted++;
}

/* Makes a function from `call`, registers it under `name`, and returns the registry's copy. */
static dvm_func* register_and_get(const char* name, DVMSafeCall call, void* self) {
  dvm_func* made;
  CHECK_OK(dvm_func_new(self, call, count_delete, &made));
  CHECK_OK(dvm_func_register_global(name, made, 0));
  dvm_func* found;
  CHECK_OK(dvm_func_get_global(name, &found));
  CHECK(found == made); /* the same object, with one more reference */
  dvm_func_free(made);  /* the registry and `found` still hold it */
  return found;
}

int main(void) {
  int magic = 1234;
  dvm_func* f_inspect = register_and_get("test.values.inspect", inspect, &magic);
  dvm_func* f_echo = register_and_get("test.values.echo", echo, NULL);
  dvm_func* f_scale = register_and_get("test.values.scale", scale, NULL);
  dvm_func* f_greet = register_and_get("test.values.greet", greet, NULL);

  /* One argument of each kind. */
  DVMAny args[NUM_ARGS];
  args[ARG_INT] = any_int(-42);
  args[ARG_FLOAT] = any_float(2.5);
  args[ARG_BOOL] = any_of(kDVMBool);
  args[ARG_BOOL].v_int64 = 1;
  CHECK_OK(dvm_string_new("hi", 2, &args[ARG_SMALL_STR]));
  CHECK(args[ARG_SMALL_STR].type_index == kDVMSmallStr);
  CHECK_OK(dvm_string_new(kLongText, strlen(kLongText), &args[ARG_STR]));
  CHECK(args[ARG_STR].type_index == kDVMStr);
  const int64_t dims[3] = {2, 3, 4};
  CHECK_OK(dvm_shape_new(dims, 3, &args[ARG_SHAPE]));
  CHECK(args[ARG_SHAPE].type_index == kDVMShape);
  args[ARG_DTYPE] = any_of(kDVMDataType);
  args[ARG_DTYPE].v_dtype = (DLDataType){kDLFloat, 16, 4};
  args[ARG_DEVICE] = any_of(kDVMDevice);
  args[ARG_DEVICE].v_device = (DLDevice){kDLCUDA, 3};

  float host[6] = {1, 2, 3, 4, 5, 6};
  int64_t host_shape[2] = {2, 3};
  DLTensor host_dl = {.data = host,
                      .device = {kDLCPU, 0},
                      .ndim = 2,
                      .dtype = {kDLFloat, 32, 1},
                      .shape = host_shape,
                      .strides = NULL,
                      .byte_offset = 0};
  args[ARG_DLTENSOR] = any_of(kDVMDLTensorPtr);
  args[ARG_DLTENSOR].v_ptr = &host_dl;

  const int64_t tensor_shape[1] = {4};
  dvm_tensor* tensor;
  CHECK_OK(dvm_tensor_empty(tensor_shape, 1, (DLDataType){kDLInt, 32, 1}, (DLDevice){kDLCPU, 0},
                            &tensor));
  const DLTensor* tensor_dl = dvm_tensor_dl(tensor);
  CHECK(tensor_dl == CELL(DLTensor, tensor)); /* the DLTensor sits right after the header */
  for (int i = 0; i < 4; i++) ((int32_t*)tensor_dl->data)[i] = 10 * i;
  args[ARG_TENSOR] = any_object(tensor);

  /* 1. Every kind arrives intact. */
  DVMAny result = any_of(kDVMNone);
  CHECK_OK(dvm_func_call(f_inspect, args, NUM_ARGS, &result));
  CHECK(result.type_index == kDVMInt && result.v_int64 == NUM_ARGS);

  /* 2. Every kind that can be owned comes back from echo unchanged. */
  const int echoed[] = {ARG_INT,   ARG_FLOAT, ARG_BOOL,   ARG_SMALL_STR, ARG_STR,
                        ARG_SHAPE, ARG_DTYPE, ARG_DEVICE, ARG_TENSOR};
  for (size_t i = 0; i < sizeof echoed / sizeof echoed[0]; i++) {
    const DVMAny* arg = &args[echoed[i]];
    uint32_t refs = arg->type_index >= kDVMStaticObjectBegin ? strong_count(arg->v_obj) : 0;
    result = any_of(kDVMNone);
    CHECK_OK(dvm_func_call(f_echo, arg, 1, &result));
    CHECK(result.type_index == arg->type_index);
    CHECK(result.zero_padding == arg->zero_padding);
    CHECK(result.v_uint64 == arg->v_uint64);
    if (arg->type_index >= kDVMStaticObjectBegin) {
      CHECK(strong_count(arg->v_obj) == refs + 1); /* the result holds its own reference */
      CHECK_OK(dvm_any_release(&result));
      CHECK(strong_count(arg->v_obj) == refs);
    }
    CHECK(dvm_any_release(&result) == DVM_OK && result.type_index == kDVMNone);
  }

  /* 3. A borrowed DLTensor* and a Tensor object both work as tensor arguments; the result is
   * a new Tensor object owned by the caller. */
  DVMAny scale_args[2] = {args[ARG_DLTENSOR], any_float(0.5)};
  result = any_of(kDVMNone);
  CHECK_OK(dvm_func_call(f_scale, scale_args, 2, &result));
  CHECK(result.type_index == kDVMTensor && strong_count(result.v_obj) == 1);
  const DLTensor* scaled = CELL(DLTensor, result.v_obj);
  CHECK(scaled->ndim == 2 && scaled->shape[0] == 2 && scaled->shape[1] == 3);
  for (int i = 0; i < 6; i++) CHECK(((const float*)scaled->data)[i] == host[i] * 0.5f);

  /* The result is itself a Tensor: pass it back in, with an Int factor. */
  DVMAny again_args[2] = {result, any_int(4)};
  DVMAny again = any_of(kDVMNone);
  CHECK_OK(dvm_func_call(f_scale, again_args, 2, &again));
  CHECK(again.type_index == kDVMTensor);
  const DLTensor* doubled = CELL(DLTensor, again.v_obj);
  for (int i = 0; i < 6; i++) CHECK(((const float*)doubled->data)[i] == host[i] * 2.0f);
  CHECK_OK(dvm_any_release(&again));
  CHECK_OK(dvm_any_release(&result));

  /* 4. Strings in every form; short results come back small, long ones as String objects. */
  DVMAny raw = any_of(kDVMRawStr);
  raw.v_c_str = "al";
  result = any_of(kDVMNone);
  CHECK_OK(dvm_func_call(f_greet, &raw, 1, &result));
  CHECK(result.type_index == kDVMSmallStr && text_equals(&result, "hi al"));
  CHECK_OK(dvm_func_call(f_greet, &args[ARG_SMALL_STR], 1, &result));
  CHECK(result.type_index == kDVMSmallStr && text_equals(&result, "hi hi"));
  CHECK_OK(dvm_func_call(f_greet, &args[ARG_STR], 1, &result));
  CHECK(result.type_index == kDVMStr && text_equals(&result, "hi a string longer than seven bytes"));
  CHECK(strong_count(result.v_obj) == 1);
  CHECK_OK(dvm_any_release(&result));

  /* 5. Clean up: every object is back to the one reference we own, then goes. */
  CHECK(strong_count(args[ARG_STR].v_obj) == 1);
  CHECK(strong_count(args[ARG_SHAPE].v_obj) == 1);
  CHECK(strong_count(tensor) == 1);
  for (int i = 0; i < NUM_ARGS; i++) {
    if (i != ARG_TENSOR) CHECK_OK(dvm_any_release(&args[i]));
  }
  dvm_tensor_free(tensor);

  dvm_func* functions[] = {f_inspect, f_echo, f_scale, f_greet};
  const char* names[] = {"test.values.inspect", "test.values.echo", "test.values.scale",
                         "test.values.greet"};
  for (int i = 0; i < 4; i++) {
    CHECK_OK(dvm_func_remove_global(names[i]));
    CHECK(strong_count(functions[i]) == 1);
    dvm_func_free(functions[i]);
  }
  CHECK(deleted == 4); /* each deleter ran when its function's last reference went */
  return check_finish();
}
