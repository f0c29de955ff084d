#include "shim.h"

#include <string.h>

#include "_cgo_export.h"

static int32_t dvm_go_call(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  return goCallFunc((uintptr_t)self, (DVMAny*)args, num_args, result);
}

static void dvm_go_delete(void* self) { goDeleteFunc((uintptr_t)self); }

dvm_status dvm_go_func_new(uintptr_t handle, dvm_func** out) {
  return dvm_func_new((void*)handle, dvm_go_call, dvm_go_delete, out);
}

static const void* object_cell(const DVMAny* value) {
  return (const char*)value->v_obj + sizeof(DVMObject);
}

DVMByteArray dvm_go_bytes_of(const DVMAny* value) {
  DVMByteArray bytes = {NULL, 0};
  switch (value->type_index) {
    case kDVMRawStr:
      bytes.data = value->v_c_str;
      bytes.size = strlen(value->v_c_str);
      break;
    case kDVMSmallStr:
    case kDVMSmallBytes:
      bytes.data = value->v_bytes;
      bytes.size = value->small_str_len;
      break;
    case kDVMStr:
    case kDVMBytes:
      bytes = *(const DVMByteArray*)object_cell(value);
      break;
    default:
      break;
  }
  return bytes;
}

DVMShapeCell dvm_go_shape_of(const DVMAny* value) {
  return *(const DVMShapeCell*)object_cell(value);
}

const DVMAny* dvm_go_array_of(const DVMAny* value, int64_t* size) {
  const DVMSeqCell* cell = (const DVMSeqCell*)object_cell(value);
  *size = cell->size;
  return (const DVMAny*)cell->data;
}

static DLTensor host_tensor(void* data, int64_t* shape, int32_t ndim, DLDataType dtype) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

dvm_status dvm_go_copy_to_worker0(dvm_session* session, void* data, int64_t* shape,
                                  int32_t ndim, DLDataType dtype, const dvm_dref* dst) {
  DLTensor host = host_tensor(data, shape, ndim, dtype);
  return dvm_session_copy_to_worker0(session, &host, dst);
}

dvm_status dvm_go_copy_from_worker0(dvm_session* session, void* data, int64_t* shape,
                                    int32_t ndim, DLDataType dtype, const dvm_dref* src) {
  DLTensor host = host_tensor(data, shape, ndim, dtype);
  return dvm_session_copy_from_worker0(session, &host, src);
}
