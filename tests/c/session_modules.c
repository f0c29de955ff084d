/*
 * Modules on workers, seen from C: this library is itself a module (it exports its functions
 * as `__tvm_ffi_<name>`), so each worker loads it and calls `current_worker_id` from it, getting
 * its own id. A path that is not a file fails at the call (ValueError naming it); a file the
 * loader refuses and a module called as a function fail the next wait (WorkerError with the
 * loader's reason, the type); a function the module lacks fails the lookup (KeyError naming it
 * and the module's path), as does a function of a module whose load failed (with the loader's
 * reason) or of a value that is no module (TypeError); the session goes on after each.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include "session_check.h"

#define WORKERS 3

/* The file this library was loaded from. */
static const char* library_path(void) {
  Dl_info info;
  if (!dladdr((void*)dvm_version, &info) || !info.dli_fname) {
    fprintf(stderr, "dladdr cannot name the library's file\n");
    exit(1);
  }
  return info.dli_fname;
}

/* A sync that must fail on every worker with a WorkerError whose message contains `text`. */
static void expect_sync_fails(dvm_session* s, const char* text) {
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR, text);
}

int main(void) {
  dvm_session* s = new_session(WORKERS);

  /* 1. Load this library on every worker and call one of its functions there. */
  dvm_dref* module;
  CHECK_OK(dvm_session_load_module(s, library_path(), &module));
  dvm_dref* worker_id;
  CHECK_OK(dvm_session_module_func(s, module, "current_worker_id", &worker_id));
  dvm_dref* ids = broadcast(s, worker_id, NULL, 0);
  for (int32_t w = 0; w < WORKERS; w++) CHECK(int_on(ids, w) == w);
  dvm_dref_free(ids);

  /* 2. A second load of the same file gives a module that works the same way. */
  dvm_dref* again;
  CHECK_OK(dvm_session_load_module(s, library_path(), &again));
  dvm_dref* worker_id2;
  CHECK_OK(dvm_session_module_func(s, again, "current_worker_id", &worker_id2));
  ids = broadcast(s, worker_id2, NULL, 0);
  CHECK(int_on(ids, WORKERS - 1) == WORKERS - 1);
  dvm_dref_free(ids);
  dvm_dref_free(worker_id2);
  dvm_dref_free(again);

  /* 3. Not a file: refused at the call, naming the path; nothing is written to out. */
  dvm_dref* untouched = (dvm_dref*)&untouched;
  EXPECT_STATUS(dvm_session_load_module(s, "/nonexistent/libnothing.so", &untouched),
                DVM_VALUE_ERROR, "/nonexistent/libnothing.so");
  EXPECT_STATUS(dvm_session_load_module(s, "/", &untouched), DVM_VALUE_ERROR, "is not a file");
  CHECK(untouched == (dvm_dref*)&untouched);

  /* 4. A file that is no shared library: each worker's load fails, with the loader's reason. */
  char text_path[] = "/tmp/discovm-not-a-library-XXXXXX";
  int fd = mkstemp(text_path);
  CHECK(fd >= 0);
  CHECK(write(fd, "not a library\n", 14) == 14);
  close(fd);
  dvm_dref* bad;
  CHECK_OK(dvm_session_load_module(s, text_path, &bad));
  EXPECT_STATUS(dvm_session_module_func(s, bad, "current_worker_id", &untouched),
                DVM_WORKER_ERROR, "cannot load module");
  expect_sync_fails(s, "cannot load module");
  dvm_dref_free(bad);
  unlink(text_path);

  /* 5. A function the module lacks: refused at the lookup, naming its symbol and the path. */
  EXPECT_STATUS(dvm_session_module_func(s, module, "no_such_function", &untouched),
                DVM_KEY_ERROR, "__tvm_ffi_no_such_function");
  EXPECT_STATUS(dvm_session_module_func(s, module, "no_such_function", &untouched),
                DVM_KEY_ERROR, library_path());
  CHECK(untouched == (dvm_dref*)&untouched);

  /* 6. A module called as if it were a function, and a function taken from a non-module. */
  dvm_dref* wrong = broadcast(s, module, NULL, 0);
  expect_sync_fails(s, "discovm.Module");
  dvm_dref_free(wrong);
  EXPECT_STATUS(dvm_session_module_func(s, worker_id, "current_worker_id", &untouched),
                DVM_TYPE_ERROR, "expected a module");
  CHECK(untouched == (dvm_dref*)&untouched);

  /* 7. The session went on through all of it. */
  ids = broadcast(s, worker_id, NULL, 0);
  CHECK(int_on(ids, 1) == 1);
  dvm_dref_free(ids);

  dvm_dref_free(worker_id);
  dvm_dref_free(module);
  end_session(s);
  return check_finish();
}
