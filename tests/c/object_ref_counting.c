/*
 * Reference counting seen from C: dvm_object_inc_ref / dvm_object_dec_ref on functions, the
 * deleter given to dvm_func_new running exactly once when the last reference goes, callees
 * keeping their own references to borrowed arguments, dvm_any_release on strings and shapes,
 * and DLPack exchange in both directions with each deleter running exactly once.
 */
#include "values.h"

static int32_t answer(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  result->type_index = kDVMInt;
  result->v_int64 = 42;
  return 0;
}

static int function_deleted;
static void count_function_delete(void* self) {
  CHECK(self == &function_deleted);
  function_deleted++;
}

/* Arguments are borrowed: a callee that keeps one takes its own reference. */
static DVMObject* kept;
static int32_t keep_argument(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)result;
  if (num_args != 1 || args[0].type_index < kDVMStaticObjectBegin) {
    dvm_error_raise("TypeError", "keep_argument takes one object");
    return -1;
  }
  if (dvm_object_inc_ref(args[0].v_obj) != DVM_OK) return -1;
  kept = args[0].v_obj;
  return 0;
}

/* Made with NULL self and deleter: receives its own function object as `self` (as in tvm-ffi). */
static void* seen_self;
static int32_t record_self(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)args, (void)num_args, (void)result;
  seen_self = self;
  return 0;
}

static int dlpack_deleted;
static void count_dlpack_delete(DLManagedTensorVersioned* self) {
  CHECK(self->manager_ctx == &dlpack_deleted);
  dlpack_deleted++;
}

/* Wraps the library's own DLPack deleter, to count its calls. */
static void (*library_deleter)(DLManagedTensorVersioned*);
static int library_deleter_calls;
static void counting_deleter(DLManagedTensorVersioned* self) {
  library_deleter_calls++;
  library_deleter(self);
}

static DVMAny none(void) {
  DVMAny v;
  memset(&v, 0, sizeof v);
  return v;
}

int main(void) {
  /* 1. A function: one reference when made, one weak reference shared by the strong ones. */
  dvm_func* f;
  CHECK_OK(dvm_func_new(&function_deleted, answer, count_function_delete, &f));
  CHECK(((const DVMObject*)f)->combined_ref_count == UINT64_C(0x100000001));
  CHECK(((const DVMObject*)f)->type_index == kDVMFunction);
  CHECK_OK(dvm_object_inc_ref(f));
  CHECK_OK(dvm_object_inc_ref(f));
  CHECK(strong_count(f) == 3 && weak_count(f) == 1);
  CHECK_OK(dvm_object_dec_ref(f));
  CHECK_OK(dvm_object_dec_ref(f));
  CHECK(strong_count(f) == 1 && function_deleted == 0);

  /* The registry holds its own reference, and so does each lookup. */
  CHECK_OK(dvm_func_register_global("test.refs.answer", f, 0));
  CHECK(strong_count(f) == 2);
  dvm_func* found;
  CHECK_OK(dvm_func_get_global("test.refs.answer", &found));
  CHECK(found == f && strong_count(f) == 3);
  dvm_func_free(found);
  CHECK_OK(dvm_func_remove_global("test.refs.answer"));
  CHECK(strong_count(f) == 1 && function_deleted == 0);

  /* Callers in the tvm-ffi world call through the function cell with the object as handle. */
  DVMAny result = none();
  CHECK(CELL(DVMFunctionCell, f)->safe_call(f, NULL, 0, &result) == 0);
  CHECK(result.type_index == kDVMInt && result.v_int64 == 42);
  CHECK(CELL(DVMFunctionCell, f)->cpp_call == NULL);

  /* A callee keeps a borrowed argument alive past our last reference. */
  dvm_func* keeper;
  CHECK_OK(dvm_func_new(NULL, keep_argument, NULL, &keeper));
  DVMAny arg = none();
  arg.type_index = kDVMFunction;
  arg.v_obj = (DVMObject*)(void*)f;
  CHECK_OK(dvm_func_call(keeper, &arg, 1, &result));
  CHECK(kept == (DVMObject*)(void*)f && strong_count(f) == 2);
  dvm_func_free(f); /* ours goes; the callee's remains */
  CHECK(function_deleted == 0 && strong_count(kept) == 1);
  CHECK_OK(dvm_object_dec_ref(kept)); /* the last one: the deleter runs now, exactly once */
  CHECK(function_deleted == 1);
  dvm_func_free(keeper);
  CHECK(function_deleted == 1);

  /* A function made without self and deleter receives itself. */
  dvm_func* self_aware;
  CHECK_OK(dvm_func_new(NULL, record_self, NULL, &self_aware));
  CHECK_OK(dvm_func_call(self_aware, NULL, 0, &result));
  CHECK(seen_self == (void*)self_aware);
  dvm_func_free(self_aware);

  /* 2. Strings and shapes held in DVMAny values, released with dvm_any_release. */
  DVMAny text = none();
  CHECK_OK(dvm_string_new("a heap string of some length", 28, &text));
  CHECK(text.type_index == kDVMStr && strong_count(text.v_obj) == 1);
  DVMAny copy = text; /* a second owner: it needs its own reference */
  CHECK_OK(dvm_object_inc_ref(copy.v_obj));
  CHECK(strong_count(text.v_obj) == 2);
  CHECK_OK(dvm_any_release(&copy));
  CHECK(copy.type_index == kDVMNone && copy.v_obj == NULL);
  CHECK(strong_count(text.v_obj) == 1);
  CHECK_OK(dvm_any_release(&text));
  CHECK(text.type_index == kDVMNone);
  CHECK_OK(dvm_any_release(&text)); /* releasing None does nothing */

  DVMAny shape = none();
  const int64_t dims[2] = {8, 16};
  CHECK_OK(dvm_shape_new(dims, 2, &shape));
  CHECK(shape.type_index == kDVMShape && strong_count(shape.v_obj) == 1);
  CHECK(CELL(DVMShapeCell, shape.v_obj)->size == 2 && CELL(DVMShapeCell, shape.v_obj)->data[1] == 16);
  CHECK_OK(dvm_object_inc_ref(shape.v_obj));
  DVMObject* shape_obj = shape.v_obj;
  CHECK_OK(dvm_any_release(&shape));
  CHECK(strong_count(shape_obj) == 1);
  CHECK_OK(dvm_object_dec_ref(shape_obj));

  DVMAny small = none(); /* small strings hold no object: release only resets them */
  CHECK_OK(dvm_string_new("tiny", 4, &small));
  CHECK(small.type_index == kDVMSmallStr);
  CHECK_OK(dvm_any_release(&small));
  CHECK(small.type_index == kDVMNone && small.v_int64 == 0);

  /* 3. A DLPack tensor made in C: the tensor takes it over, and its deleter runs once, when the
   * last reference to the tensor goes. */
  float data[6] = {1, 2, 3, 4, 5, 6};
  int64_t data_shape[2] = {2, 3};
  DLManagedTensorVersioned* managed = malloc(sizeof *managed);
  CHECK(managed != NULL);
  *managed = (DLManagedTensorVersioned){
      .version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
      .manager_ctx = &dlpack_deleted,
      .deleter = count_dlpack_delete,
      .flags = 0,
      .dl_tensor = {.data = data, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1},
                    .shape = data_shape, .strides = NULL, .byte_offset = 0},
  };
  dvm_tensor* wrapped;
  CHECK_OK(dvm_tensor_from_dlpack(managed, &wrapped));
  const DLTensor* dl = dvm_tensor_dl(wrapped);
  CHECK(dl->data == data && dl->ndim == 2 && dl->shape[0] == 2 && dl->shape[1] == 3);
  CHECK(((const DVMObject*)wrapped)->type_index == kDVMTensor);
  CHECK_OK(dvm_object_inc_ref(wrapped));
  dvm_tensor_free(wrapped);
  CHECK(dlpack_deleted == 0);
  dvm_tensor_free(wrapped);
  CHECK(dlpack_deleted == 1);
  free(managed);

  /* 4. The round trip: export a tensor, import the export. No copies; the export keeps the
   * tensor alive, and its deleter runs once, when the imported tensor goes. */
  dvm_tensor* tensor;
  CHECK_OK(dvm_tensor_empty(data_shape, 2, (DLDataType){kDLFloat, 32, 1}, (DLDevice){kDLCPU, 0},
                            &tensor));
  float* values = (float*)dvm_tensor_dl(tensor)->data;
  for (int i = 0; i < 6; i++) values[i] = (float)(i * i);
  DLManagedTensorVersioned* exported;
  CHECK_OK(dvm_tensor_to_dlpack(tensor, &exported));
  CHECK(exported->version.major == DLPACK_MAJOR_VERSION);
  CHECK(exported->dl_tensor.data == values && exported->dl_tensor.ndim == 2);
  CHECK(exported->dl_tensor.shape[0] == 2 && exported->dl_tensor.shape[1] == 3);
  CHECK(strong_count(tensor) == 2); /* ours and the export's */
  library_deleter = exported->deleter;
  exported->deleter = counting_deleter;

  dvm_tensor* imported;
  CHECK_OK(dvm_tensor_from_dlpack(exported, &imported));
  CHECK(imported != tensor);
  CHECK(dvm_tensor_dl(imported)->data == values);
  CHECK(((const float*)dvm_tensor_dl(imported)->data)[5] == 25.0f);
  CHECK(library_deleter_calls == 0);
  dvm_tensor_free(imported);
  CHECK(library_deleter_calls == 1);
  CHECK(strong_count(tensor) == 1);

  /* A consumer may also give an export back by calling its deleter itself. */
  CHECK_OK(dvm_tensor_to_dlpack(tensor, &exported));
  CHECK(strong_count(tensor) == 2);
  exported->deleter(exported);
  CHECK(strong_count(tensor) == 1);
  dvm_tensor_free(tensor);

  return check_finish();
}
