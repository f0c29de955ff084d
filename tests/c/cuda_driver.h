/* CUDA driver calls that a test or benchmark makes itself, next to the library's: the driver
 * (libcuda.so.1) is loaded at run time, so no CUDA toolkit is needed to build. */
#ifndef DISCOVM_TESTS_CUDA_DRIVER_H
#define DISCOVM_TESTS_CUDA_DRIVER_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

/* Stores the driver's function `name` in the function pointer at `field`; exits with a message
 * when the driver or the function is missing. */
static inline void driver_function(void* field, const char* name) {
  static void* driver;
  if (!driver && !(driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) {
    fprintf(stderr, "cannot load libcuda.so.1: %s\n", dlerror());
    exit(1);
  }
  void* function = dlsym(driver, name);
  if (!function) {
    fprintf(stderr, "libcuda.so.1 lacks %s\n", name);
    exit(1);
  }
  memcpy(field, &function, sizeof function);
}

#endif
