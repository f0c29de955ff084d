/*
 * upload_module.c: a module for the tests of modules uploaded to the nodes of a session across
 * machines. upload_from_upload_dir() returns 1 when this very file was loaded from a node's
 * directory of uploads (a path with "/discovm-uploads-" in it), 0 otherwise.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "discovm.h"

__attribute__((visibility("default"))) int32_t __tvm_ffi_upload_from_upload_dir(
    void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  Dl_info info;
  int from_dir = dladdr((void*)__tvm_ffi_upload_from_upload_dir, &info) && info.dli_fname &&
                 strstr(info.dli_fname, "/discovm-uploads-") != NULL;
  memset(result, 0, sizeof *result);
  result->type_index = kDVMInt;
  result->v_int64 = from_dir;
  return 0;
}
