/*
 * process_worker.c: the worker program of the process-session tests, a user's worker program
 * as docs/processes.md describes one: it registers its functions, then returns dvm_worker_main.
 * Those the session tests call on both kinds of session (fail_on, expect_next, count, wait_for,
 * and add and echo) are registered for worker threads too, by support/session_kinds.rs.
 *
 *   proc.pid()            this process's id
 *   proc.add(a, b)        a + b, for Ints
 *   proc.echo(x)          x itself (a new reference to an object)
 *   proc.fail(message)    raises a ValueError with the message
 *   proc.sleep_ms(ms)     sleeps, then returns None
 *   proc.exit(status)     ends the process with that status
 *   proc.segv()           ends it by SIGSEGV
 *   proc.abort()          ends it by abort()
 *   proc.scale(t, k)      multiplies the float32 tensor t by k, in place
 *   proc.heap_empty(n)    a zeroed float32 tensor of n elements in this process's own memory
 *                         (outside the session's arena, unlike runtime.disco.empty's)
 *   proc.fail_on(w, x)    raises a ValueError on worker w; x on the others
 *   proc.expect_next(i)   raises a ValueError unless i is the next in this worker's count of
 *                         these calls (0 first)
 *   proc.count()          how many times this worker ran proc.count, this call included
 *   proc.wait_for(path)   waits until a byte can be read from the FIFO at path, or its writers
 *                         are gone, then returns None
 *   proc.allreduce_but(w, fail, send, recv)
 *                         on worker w, raises a ValueError if fail, else returns None at once;
 *                         on the others, sums send into recv with runtime.disco.allreduce
 */
#define _DEFAULT_SOURCE

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "discovm.h"

static void set_int(DVMAny* result, int64_t value) {
  memset(result, 0, sizeof *result);
  result->type_index = kDVMInt;
  result->v_int64 = value;
}

static int32_t pid(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  set_int(result, getpid());
  return 0;
}

static int32_t add(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 2 || args[0].type_index != kDVMInt || args[1].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "proc.add takes two Ints");
    return -1;
  }
  set_int(result, args[0].v_int64 + args[1].v_int64);
  return 0;
}

static int32_t echo(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1) {
    dvm_error_raise("TypeError", "proc.echo takes one value");
    return -1;
  }
  *result = args[0];
  if (result->type_index >= kDVMStaticObjectBegin && dvm_object_inc_ref(result->v_obj) != DVM_OK) {
    return -1;
  }
  return 0;
}

static int32_t fail(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  dvm_error_raise("ValueError", "proc.fail was asked to fail");
  return -1;
}

static int32_t sleep_ms(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)num_args, (void)result;
  usleep((useconds_t)(args[0].v_int64 * 1000));
  return 0;
}

static int32_t exit_with(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)num_args, (void)result;
  exit((int)args[0].v_int64);
}

static int32_t segv(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  raise(SIGSEGV);
  return 0;
}

static int32_t abort_now(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  abort();
}

static int32_t scale(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)result;
  if (num_args != 2 || args[0].type_index != kDVMTensor || args[1].type_index != kDVMFloat) {
    dvm_error_raise("TypeError", "proc.scale takes a tensor and a Float");
    return -1;
  }
  const DLTensor* t = (const DLTensor*)((const DVMObject*)args[0].v_obj + 1);
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  float* data = (float*)((char*)t->data + t->byte_offset);
  for (int64_t i = 0; i < n; i++) data[i] *= (float)args[1].v_float64;
  return 0;
}

static int32_t heap_empty(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "proc.heap_empty takes an Int");
    return -1;
  }
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  dvm_tensor* t;
  if (dvm_tensor_empty(&args[0].v_int64, 1, f32, cpu, &t) != DVM_OK) return -1;
  result->type_index = kDVMTensor;
  result->v_obj = (DVMObject*)t;
  return 0;
}

static int32_t fail_on(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 2 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "proc.fail_on takes a worker id and a value");
    return -1;
  }
  if (args[0].v_int64 == dvm_current_worker_id()) {
    dvm_error_raise("ValueError", "boom on purpose");
    return -1;
  }
  return echo(self, args + 1, 1, result);
}

static int32_t expect_next(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  static int64_t next = 0;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "proc.expect_next takes an Int");
    return -1;
  }
  int64_t seen = args[0].v_int64, expected = next;
  next = seen + 1;
  if (seen != expected) {
    char message[96];
    snprintf(message, sizeof message, "call %" PRId64 " ran where %" PRId64 " was due", seen,
             expected);
    dvm_error_raise("ValueError", message);
    return -1;
  }
  memset(result, 0, sizeof *result);
  return 0;
}

static int32_t count(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  static int64_t calls = 0;
  set_int(result, ++calls);
  return 0;
}

static int32_t wait_for(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  /* A path of more than 7 bytes is a string object. */
  if (num_args != 1 || args[0].type_index != kDVMStr) {
    dvm_error_raise("TypeError", "proc.wait_for takes an absolute path");
    return -1;
  }
  const DVMByteArray* text = (const DVMByteArray*)((const DVMObject*)args[0].v_obj + 1);
  char path[4096];
  if (text->size >= sizeof path) {
    dvm_error_raise("ValueError", "proc.wait_for: the path is too long");
    return -1;
  }
  memcpy(path, text->data, text->size);
  path[text->size] = '\0';
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    dvm_error_raise("RuntimeError", "proc.wait_for cannot open the FIFO");
    return -1;
  }
  char byte;
  ssize_t got = read(fd, &byte, 1);
  close(fd);
  if (got < 0) {
    dvm_error_raise("RuntimeError", "proc.wait_for cannot read the FIFO");
    return -1;
  }
  memset(result, 0, sizeof *result);
  return 0;
}

static int32_t allreduce_but(void* self, const DVMAny* args, int32_t num_args,
                             DVMAny* result) {
  (void)self;
  if (num_args != 4 || args[0].type_index != kDVMInt || args[1].type_index != kDVMBool) {
    dvm_error_raise("TypeError", "proc.allreduce_but takes (worker, fail, send, recv)");
    return -1;
  }
  memset(result, 0, sizeof *result);
  if (dvm_current_worker_id() == args[0].v_int64) {
    if (args[1].v_int64) {
      dvm_error_raise("ValueError", "failed before the allreduce on purpose");
      return -1;
    }
    return 0;
  }
  dvm_func* allreduce;
  if (dvm_func_get_global("runtime.disco.allreduce", &allreduce) != DVM_OK) return -1;
  int64_t sum = 0;
  DVMAny call_args[4];
  call_args[0] = args[2];
  if (dvm_shape_new(&sum, 1, &call_args[1]) != DVM_OK) {
    dvm_func_free(allreduce);
    return -1;
  }
  memset(&call_args[2], 0, sizeof call_args[2]);
  call_args[2].type_index = kDVMBool;
  call_args[3] = args[3];
  DVMAny none;
  dvm_status called = dvm_func_call(allreduce, call_args, 4, &none);
  dvm_any_release(&call_args[1]);
  dvm_func_free(allreduce);
  return called == DVM_OK ? 0 : -1;
}

/* proc.stream_copy(n): copies n bytes between two tensors on a CPU stream of its own, which a
 * thread of the library runs, and waits for it. */
static int32_t stream_copy(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "proc.stream_copy takes (bytes)");
    return -1;
  }
  memset(result, 0, sizeof *result);
  DLDevice cpu = {kDLCPU, 0};
  DLDataType u8 = {kDLUInt, 8, 1};
  int64_t n = args[0].v_int64;
  dvm_stream* s = NULL;
  dvm_tensor *src = NULL, *dst = NULL;
  int ok = dvm_stream_new(cpu, &s) == DVM_OK && dvm_tensor_empty(&n, 1, u8, cpu, &src) == DVM_OK &&
           dvm_tensor_empty(&n, 1, u8, cpu, &dst) == DVM_OK &&
           dvm_tensor_copy(dst, src, s) == DVM_OK && dvm_stream_sync(s) == DVM_OK;
  if (dst) dvm_tensor_free(dst);
  if (src) dvm_tensor_free(src);
  if (s) dvm_stream_free(s);
  return ok ? 0 : -1;
}

static void define(const char* name, DVMSafeCall call) {
  dvm_func* f;
  if (dvm_func_new(NULL, call, NULL, &f) != DVM_OK ||
      dvm_func_register_global(name, f, 0) != DVM_OK) {
    abort();
  }
  dvm_func_free(f);
}

int main(int argc, char** argv) {
  define("proc.pid", pid);
  define("proc.add", add);
  define("proc.echo", echo);
  define("proc.fail", fail);
  define("proc.sleep_ms", sleep_ms);
  define("proc.exit", exit_with);
  define("proc.segv", segv);
  define("proc.abort", abort_now);
  define("proc.scale", scale);
  define("proc.heap_empty", heap_empty);
  define("proc.fail_on", fail_on);
  define("proc.expect_next", expect_next);
  define("proc.count", count);
  define("proc.wait_for", wait_for);
  define("proc.allreduce_but", allreduce_but);
  define("proc.stream_copy", stream_copy);
  return dvm_worker_main(argc, argv);
}
