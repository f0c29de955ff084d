/*
 * Bad inputs to the stream and tensor-access functions: each returns its documented status,
 * with the matching error kind and a message that names what was wrong, and writes nothing to
 * its output. Zero-sized tensors are not bad inputs: they work.
 */
#include <stdint.h>

#include "check.h"

static const DLDevice cpu = {kDLCPU, 0};
static const DLDataType f32 = {kDLFloat, 32, 1};
static const DLDataType i32 = {kDLInt, 32, 1};

static dvm_tensor* new_tensor(const int64_t* shape, int32_t ndim, DLDataType dtype) {
  dvm_tensor* t = NULL;
  CHECK_OK(dvm_tensor_empty(shape, ndim, dtype, cpu, &t));
  return t;
}

static int deleted;
static void count_delete(DLManagedTensorVersioned* self) {
  (void)self;
  deleted++;
}

int main(void) {
  const int64_t shape23[2] = {2, 3};
  const int64_t shape32[2] = {3, 2};
  const int64_t shape6[1] = {6};
  dvm_stream* s = NULL;
  CHECK_OK(dvm_stream_new(cpu, &s));
  dvm_tensor* a = new_tensor(shape23, 2, f32);
  dvm_tensor* same = new_tensor(shape23, 2, f32);
  dvm_tensor* other_dtype = new_tensor(shape23, 2, i32);
  dvm_tensor* other_shape = new_tensor(shape32, 2, f32);
  dvm_tensor* flat = new_tensor(shape6, 1, f32);
  char buffer[64] = {0};

  /* A strided view, made through DLPack: 3 of every other float. */
  static float strided_data[6];
  static int64_t strided_shape[1] = {3};
  static int64_t strided_strides[1] = {2};
  DLManagedTensorVersioned managed;
  memset(&managed, 0, sizeof managed);
  managed.version.major = 1;
  managed.deleter = count_delete;
  managed.dl_tensor.data = strided_data;
  managed.dl_tensor.device = cpu;
  managed.dl_tensor.ndim = 1;
  managed.dl_tensor.dtype = f32;
  managed.dl_tensor.shape = strided_shape;
  managed.dl_tensor.strides = strided_strides;
  dvm_tensor* strided = NULL;
  CHECK_OK(dvm_tensor_from_dlpack(&managed, &strided));
  dvm_tensor* three = NULL;
  CHECK_OK(dvm_tensor_empty(strided_shape, 1, f32, cpu, &three));

  /* The table: each call, the status it must return and text its message must hold. */
#define BAD(call, expected, text) EXPECT_STATUS(call, expected, text)
  BAD(dvm_tensor_read(NULL, buffer, 4), DVM_VALUE_ERROR, "`t` is NULL");
  BAD(dvm_tensor_read(a, NULL, 4), DVM_VALUE_ERROR, "`dst` is NULL");
  BAD(dvm_tensor_read(a, buffer, 25), DVM_VALUE_ERROR,
      "25 bytes cannot be read from a tensor of 24 bytes");
  BAD(dvm_tensor_read(a, buffer, SIZE_MAX), DVM_VALUE_ERROR,
      "cannot be read from a tensor of 24 bytes");
  BAD(dvm_tensor_read((dvm_tensor*)s, buffer, 4), DVM_TYPE_ERROR,
      "`t` is not a tensor (it is discovm.Stream)");
  BAD(dvm_tensor_read(strided, buffer, 4), DVM_VALUE_ERROR,
      "`t` is a strided view (shape [3], strides [2])");
  BAD(dvm_tensor_write(a, NULL, 4), DVM_VALUE_ERROR, "`src` is NULL");
  BAD(dvm_tensor_write(a, buffer, 25), DVM_VALUE_ERROR,
      "25 bytes cannot be written to a tensor of 24 bytes");
  BAD(dvm_tensor_copy(other_dtype, a, s), DVM_VALUE_ERROR,
      "cannot copy `src`, a [2, 3] float32 tensor (24 bytes), into `dst`, a [2, 3] int32 tensor "
      "(24 bytes): shapes, dtypes and sizes must match");
  BAD(dvm_tensor_copy(other_shape, a, s), DVM_VALUE_ERROR, "into `dst`, a [3, 2] float32 tensor");
  BAD(dvm_tensor_copy(flat, a, s), DVM_VALUE_ERROR, "into `dst`, a [6] float32 tensor");
  BAD(dvm_tensor_copy(three, strided, s), DVM_VALUE_ERROR, "`src` is a strided view");
  BAD(dvm_tensor_copy(NULL, a, s), DVM_VALUE_ERROR, "`dst` is NULL");
  BAD(dvm_tensor_copy(a, NULL, s), DVM_VALUE_ERROR, "`src` is NULL");
  BAD(dvm_tensor_copy(same, a, NULL), DVM_VALUE_ERROR, "`s` is NULL");
  BAD(dvm_tensor_copy(same, a, (dvm_stream*)a), DVM_TYPE_ERROR,
      "`s` is not a stream (it is ffi.Tensor)");
  BAD(dvm_stream_sync(NULL), DVM_VALUE_ERROR, "`s` is NULL");
  BAD(dvm_stream_wait(NULL, s), DVM_VALUE_ERROR, "`waiter` is NULL");
  BAD(dvm_stream_wait(s, NULL), DVM_VALUE_ERROR, "`signaler` is NULL");
  BAD(dvm_stream_wait(s, (dvm_stream*)a), DVM_TYPE_ERROR, "`signaler` is not a stream");

  /* Streams on devices without a backend, or out of range, and NULL outputs. */
  dvm_stream* untouched = (dvm_stream*)&managed;
  DLDevice gpu = {kDLCUDA, 1000}; /* no machine has GPU 1000 */
  DLDevice cpu1 = {kDLCPU, 1};
  BAD(dvm_stream_new(gpu, &untouched), DVM_DEVICE_UNAVAILABLE, "CUDA device 1000: ");
  BAD(dvm_stream_new(cpu1, &untouched), DVM_VALUE_ERROR, "CPU device id 1 is out of range");
  BAD(dvm_stream_new(cpu, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  CHECK(untouched == (dvm_stream*)&managed);

  /* Overflowing and negative shapes never become tensors. */
  const int64_t huge[2] = {INT64_MAX, 2};
  const int64_t negative[2] = {2, -1};
  dvm_tensor* none = NULL;
  BAD(dvm_tensor_empty(huge, 2, f32, cpu, &none), DVM_VALUE_ERROR, "too large to address");
  BAD(dvm_tensor_empty(negative, 2, f32, cpu, &none), DVM_VALUE_ERROR,
      "dimension 1 of shape [2, -1] is negative");
  CHECK(none == NULL);

  /* Nothing above queued work that could fail. */
  CHECK_OK(dvm_stream_sync(s));

  /* Zero-sized tensors work: copies, reads and writes of 0 bytes (NULL buffers are fine). */
  const int64_t empty_shape[2] = {0, 3};
  dvm_tensor* e1 = new_tensor(empty_shape, 2, f32);
  dvm_tensor* e2 = new_tensor(empty_shape, 2, f32);
  CHECK_OK(dvm_tensor_copy(e2, e1, s));
  CHECK_OK(dvm_tensor_read(e2, NULL, 0));
  CHECK_OK(dvm_tensor_write(e2, NULL, 0));
  BAD(dvm_tensor_read(e2, buffer, 1), DVM_VALUE_ERROR,
      "1 bytes cannot be read from a tensor of 0 bytes");
  CHECK_OK(dvm_stream_sync(s));

  /* Partial reads and writes touch the first bytes only. */
  float values[6] = {1, 2, 3, 4, 5, 6};
  CHECK_OK(dvm_tensor_write(a, values, sizeof values));
  float two[2] = {-1, -2};
  CHECK_OK(dvm_tensor_write(a, two, sizeof two));
  float back[6] = {0};
  CHECK_OK(dvm_tensor_read(a, back, sizeof back));
  CHECK(back[0] == -1 && back[1] == -2 && back[2] == 3 && back[5] == 6);

  dvm_tensor_free(e1);
  dvm_tensor_free(e2);
  dvm_tensor_free(strided);
  CHECK(deleted == 1);
  dvm_tensor_free(three);
  dvm_tensor_free(a);
  dvm_tensor_free(same);
  dvm_tensor_free(other_dtype);
  dvm_tensor_free(other_shape);
  dvm_tensor_free(flat);
  dvm_stream_free(s);
  dvm_stream_free(NULL);
  return check_finish();
}
