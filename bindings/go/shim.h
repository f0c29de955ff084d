/* C helpers of the Go package: what cgo cannot spell (function pointers, a DLTensor built on
 * the C stack, anonymous unions) in a few small functions. */
#ifndef DISCOVM_GO_SHIM_H
#define DISCOVM_GO_SHIM_H

#include <stdint.h>
#include <stdlib.h>
#include "discovm.h"

/* A function whose calls run the Go function behind the cgo.Handle `handle`. */
dvm_status dvm_go_func_new(uintptr_t handle, dvm_func** out);

/* The bytes of a string or byte-string value (RawStr, SmallStr, Str, SmallBytes, Bytes). */
DVMByteArray dvm_go_bytes_of(const DVMAny* value);

/* The dimensions of a Shape value. */
DVMShapeCell dvm_go_shape_of(const DVMAny* value);

/* The elements of an Array value. */
const DVMAny* dvm_go_array_of(const DVMAny* value, int64_t* size);

/* Copies between host memory `data` (a compact tensor of `shape` and `dtype`) and worker 0. */
dvm_status dvm_go_copy_to_worker0(dvm_session* session, void* data, int64_t* shape,
                                  int32_t ndim, DLDataType dtype, const dvm_dref* dst);
dvm_status dvm_go_copy_from_worker0(dvm_session* session, void* data, int64_t* shape,
                                    int32_t ndim, DLDataType dtype, const dvm_dref* src);

#endif
