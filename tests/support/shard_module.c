/*
 * shard_module.c: a module for the tests of the weight loader (tests/weights.rs), which every
 * kind of worker loads (threads, processes, nodes). Its functions:
 *
 *   shard_rows(src, n, dst)      a matrix [R, C] cut into n blocks of rows: dst [n, R/n, C]
 *   shard_cols(src, n, dst)      a matrix [R, C] cut into n blocks of columns: dst [n, R, C/n]
 *   fail_to_shard(src, n, dst)   raises a ValueError
 *   array_item(array, i)         item i of an Array (the loader's ShardLoaderLoadAll returns
 *                                one, which cannot cross to the controller whole)
 *   get_shard_info()             shard_info naming shard_rows for parameter "param_0"
 *
 * Tensors come as tensor objects or as DLTensor pointers, compact, in host memory.
 */
#include <stdio.h>
#include <string.h>

#include "discovm.h"

#define EXPORT __attribute__((visibility("default")))

static const DLTensor* tensor_of(const DVMAny* value) {
  if (value->type_index == kDVMTensor) return (const DLTensor*)(value->v_obj + 1);
  if (value->type_index == kDVMDLTensorPtr) return (const DLTensor*)value->v_ptr;
  return NULL;
}

static int64_t count(const DLTensor* t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* The tensors and shard count of (src, n, dst), checked: src a matrix whose dimension `axis`
 * n divides, dst as many bytes of the same dtype. */
static int shard_args(const DVMAny* args, int32_t num_args, int axis, const DLTensor** src,
                      int64_t* n, const DLTensor** dst) {
  if (num_args != 3 || args[1].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "a shard function takes (src, n, dst)");
    return -1;
  }
  *src = tensor_of(&args[0]);
  *n = args[1].v_int64;
  *dst = tensor_of(&args[2]);
  if (*src == NULL || *dst == NULL || (*src)->ndim != 2 || *n <= 0 ||
      (*src)->shape[axis] % *n != 0 || count(*src) != count(*dst) ||
      (*src)->dtype.bits != (*dst)->dtype.bits) {
    dvm_error_raise("ValueError", "a shard function takes a matrix n divides and its shards");
    return -1;
  }
  return 0;
}

EXPORT int32_t __tvm_ffi_shard_rows(void* self, const DVMAny* args, int32_t num_args,
                                    DVMAny* result) {
  (void)self, (void)result;
  const DLTensor *src, *dst;
  int64_t n;
  if (shard_args(args, num_args, 0, &src, &n, &dst) != 0) return -1;
  /* Blocks of rows lie one after another already. */
  memcpy(dst->data, src->data, (size_t)(count(src) * src->dtype.bits / 8));
  return 0;
}

EXPORT int32_t __tvm_ffi_shard_cols(void* self, const DVMAny* args, int32_t num_args,
                                    DVMAny* result) {
  (void)self, (void)result;
  const DLTensor *src, *dst;
  int64_t n;
  if (shard_args(args, num_args, 1, &src, &n, &dst) != 0) return -1;
  size_t elem = (size_t)src->dtype.bits / 8;
  int64_t rows = src->shape[0], cols = src->shape[1], part = cols / n;
  const char* from = (const char*)src->data;
  char* to = (char*)dst->data;
  for (int64_t s = 0; s < n; s++)
    for (int64_t r = 0; r < rows; r++)
      memcpy(to + (size_t)((s * rows + r) * part) * elem,
             from + (size_t)(r * cols + s * part) * elem, (size_t)part * elem);
  return 0;
}

EXPORT int32_t __tvm_ffi_fail_to_shard(void* self, const DVMAny* args, int32_t num_args,
                                       DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  dvm_error_raise("ValueError", "fail_to_shard fails on purpose");
  return -1;
}

EXPORT int32_t __tvm_ffi_array_item(void* self, const DVMAny* args, int32_t num_args,
                                    DVMAny* result) {
  (void)self;
  if (num_args != 2 || args[0].type_index != kDVMArray || args[1].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "array_item takes (array, i)");
    return -1;
  }
  const DVMSeqCell* seq = (const DVMSeqCell*)(args[0].v_obj + 1);
  int64_t i = args[1].v_int64;
  if (i < 0 || i >= seq->size) {
    dvm_error_raise("IndexError", "array_item: index out of range");
    return -1;
  }
  const DVMAny* item = (const DVMAny*)seq->data + i;
  if (item->type_index >= kDVMStaticObjectBegin && dvm_object_inc_ref(item->v_obj) != DVM_OK)
    return -1;
  *result = *item;
  return 0;
}

EXPORT int32_t __tvm_ffi_get_shard_info(void* self, const DVMAny* args, int32_t num_args,
                                        DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  const char* info = "{\"param_0\": [[\"shard_rows\", [[2, 2, 3], \"float32\"], 2]]}";
  return dvm_string_new(info, strlen(info), result) == DVM_OK ? 0 : -1;
}
