/* NCCL collectives between CUDA workers: a session with one worker per GPU (1, 2 or 4; NCCL
 * needs a GPU of its own for each rank, so a one-GPU machine runs the single-rank path) calls
 * Disco's built-ins after dvm_session_init_ccl(s, "nccl"): allreduce (every kind), allgather,
 * broadcast, scatter, gather and barrier, for ten dtypes and 1 to 2^20 elements, on tensors made
 * by runtime.disco.empty on each worker's GPU. Each worker fills its tensors and checks the
 * results itself (C callbacks running on the workers, through dvm_tensor_write/read) against a
 * reference computed here. Also: a copy to worker 0, an allreduce and a copy back, with no sync
 * in between (the worker's stream orders them); misuse (CPU tensors, wrong sizes, device ids
 * that are not the workers', two workers on one GPU, "cpu" on GPU workers), and init_ccl twice.
 * All of it on worker threads, on worker processes (this program is its own worker program:
 * the unique ids cross to the processes, each of which joins with its own GPU), and, with two
 * GPUs or more, on a session of two nodes (this program is also the second node's program,
 * started as a child process that sees only the GPUs after the first node's, through
 * CUDA_VISIBLE_DEVICES: the unique ids cross the node's connection).
 *
 * Exits 77 (skipped) without a GPU, or when NCCL cannot be loaded (set DISCOVM_NCCL_LIBRARY to
 * the path of libnccl.so.2). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>

#include "cuda_check.h"
#include "session_check.h"
#include "session_kinds.h"

/* The workers of the session (set by run for each kind; the callbacks, which may run in worker
 * processes, are passed it). */
static int32_t workers;

/* The dtypes under test, in the order the callbacks receive as an index. */
static const struct {
  const char* name;
  DLDataType dtype;
  int is_float;
} kTypes[] = {
    {"int8", {kDLInt, 8, 1}, 0},       {"uint8", {kDLUInt, 8, 1}, 0},
    {"int32", {kDLInt, 32, 1}, 0},     {"uint32", {kDLUInt, 32, 1}, 0},
    {"int64", {kDLInt, 64, 1}, 0},     {"uint64", {kDLUInt, 64, 1}, 0},
    {"float16", {kDLFloat, 16, 1}, 1}, {"bfloat16", {kDLBfloat, 16, 1}, 1},
    {"float32", {kDLFloat, 32, 1}, 1}, {"float64", {kDLFloat, 64, 1}, 1},
};
enum { TYPES = sizeof kTypes / sizeof kTypes[0], FLOAT32 = 8 };

/* What a check compares against. */
enum { ALLREDUCE = 0 /* + Disco's kind, 0..4 */, ALLGATHER = 10, BROADCAST, SCATTER, GATHER };

/* Worker w's value at element i: 1, 2 or 3, so products of 4 stay exact in every dtype. */
static double value(int32_t w, int64_t i) { return (double)((w * 3 + i) % 3 + 1); }

static double expected(int test, int32_t worker, int64_t i, int64_t count, int32_t n) {
  switch (test) {
    case ALLGATHER:
    case GATHER: return value((int32_t)(i / count), i % count);
    case BROADCAST: return value(0, i);
    case SCATTER: return value(0, worker * count + i);
    default: break;
  }
  double acc = value(0, i);
  for (int32_t w = 1; w < n; w++) {
    double x = value(w, i);
    switch (test - ALLREDUCE) {
      case 1: acc *= x; break;
      case 2: acc = x < acc ? x : acc; break;
      case 3: acc = x > acc ? x : acc; break;
      default: acc += x; break; /* sum, and avg's sum */
    }
  }
  return test - ALLREDUCE == 4 ? acc / n : acc;
}

/* Stores x (exactly representable: small integers and halves) as dtype kTypes[t]. */
static void encode(int t, double x, unsigned char* out) {
  DLDataType d = kTypes[t].dtype;
  float f = (float)x;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  if (d.code == kDLFloat && d.bits == 16) {
    uint16_t half = 0;
    if (bits != 0) {
      uint32_t exponent = ((bits >> 23) & 0xff) - 127 + 15;
      half = (uint16_t)(((bits >> 16) & 0x8000) | (exponent << 10) | ((bits >> 13) & 0x3ff));
    }
    memcpy(out, &half, 2);
  } else if (d.code == kDLBfloat) {
    uint16_t top = (uint16_t)(bits >> 16);
    memcpy(out, &top, 2);
  } else if (d.code == kDLFloat && d.bits == 32) {
    memcpy(out, &f, 4);
  } else if (d.code == kDLFloat) {
    memcpy(out, &x, 8);
  } else {
    int64_t v = (int64_t)x;
    memcpy(out, &v, d.bits / 8); /* little-endian: the low bytes */
  }
}

/* test.nccl.fill(tensor, type): the tensor holds value(this worker, i) at element i. */
static int32_t fill_values(void* self, const DVMAny* args, int32_t n, DVMAny* result) {
  (void)self, (void)n, (void)result;
  const DLTensor* dl = CELL(DLTensor, args[0].v_obj);
  int t = (int)args[1].v_int64;
  size_t elem = kTypes[t].dtype.bits / 8, count = (size_t)dl->shape[0];
  unsigned char* bytes = malloc(count * elem);
  if (!bytes) return fail_with_last_error();
  for (size_t i = 0; i < count; i++) {
    encode(t, value(dvm_current_worker_id(), (int64_t)i), bytes + i * elem);
  }
  dvm_status status = dvm_tensor_write((dvm_tensor*)args[0].v_obj, bytes, count * elem);
  free(bytes);
  return status == DVM_OK ? 0 : fail_with_last_error();
}

/* test.nccl.check(tensor, type, test, count, workers) -> the number of elements that differ from the
 * reference (0 for a gather's non-root workers, whose recv is not written). */
static int32_t check_values(void* self, const DVMAny* args, int32_t n, DVMAny* result) {
  (void)self, (void)n;
  int32_t worker = dvm_current_worker_id();
  const DLTensor* dl = CELL(DLTensor, args[0].v_obj);
  int t = (int)args[1].v_int64, test = (int)args[2].v_int64;
  int64_t count = args[3].v_int64;
  int32_t of = (int32_t)args[4].v_int64;
  result->type_index = kDVMInt;
  result->v_int64 = 0;
  if (test == GATHER && worker != 0) return 0;
  size_t elem = kTypes[t].dtype.bits / 8, total = (size_t)dl->shape[0];
  unsigned char* got = malloc(total * elem);
  if (!got) return fail_with_last_error();
  if (dvm_tensor_read((dvm_tensor*)args[0].v_obj, got, total * elem) != DVM_OK) {
    free(got);
    return fail_with_last_error();
  }
  unsigned char want[8];
  for (size_t i = 0; i < total; i++) {
    encode(t, expected(test, worker, (int64_t)i, count, of), want);
    if (memcmp(want, got + i * elem, elem) != 0) {
      if (result->v_int64 == 0) {
        fprintf(stderr, "worker %d: %s test %d count %lld: element %zu differs\n", (int)worker,
                kTypes[t].name, test, (long long)count, i);
      }
      result->v_int64++;
    }
  }
  free(got);
  return 0;
}

static dvm_dref* empty(dvm_session* s, int t, int64_t count) {
  DVMAny args[2] = {any_none(), any_dtype(kTypes[t].dtype)};
  CHECK_OK(dvm_shape_new(&count, 1, &args[0]));
  dvm_dref* f = session_func(s, "runtime.disco.empty");
  dvm_dref* out = broadcast(s, f, args, 2);
  dvm_dref_free(f);
  CHECK_OK(dvm_any_release(&args[0]));
  return out;
}

/* Calls global `name` on every worker, with DRefs or NULL (None) and other values. */
static void call(dvm_session* s, const char* name, DVMAny* args, int32_t n) {
  dvm_dref* f = session_func(s, name);
  dvm_dref_free(broadcast(s, f, args, n));
  dvm_dref_free(f);
}

static DVMAny kind_shape(int64_t kind) {
  DVMAny shape = any_none();
  CHECK_OK(dvm_shape_new(&kind, 1, &shape));
  return shape;
}

/* Every worker checks `r` against test `test`; all must match. */
static void expect_values(dvm_session* s, dvm_dref* r, int t, int test, int64_t count) {
  DVMAny args[5] = {any_dref(r), any_int(t), any_int(test), any_int(count), any_int(workers)};
  dvm_dref* f = session_func(s, "test.nccl.check");
  dvm_dref* bad = broadcast(s, f, args, 5);
  for (int32_t w = 0; w < workers; w++) {
    int64_t wrong = int_on(bad, w);
    if (wrong != 0) {
      fprintf(stderr, "%s, %lld elements per worker, test %d: %lld wrong on worker %d\n",
              kTypes[t].name, (long long)count, test, (long long)wrong, (int)w);
    }
    CHECK(wrong == 0);
  }
  dvm_dref_free(bad);
  dvm_dref_free(f);
}

static void fill_on_workers(dvm_session* s, dvm_dref* r, int t) {
  DVMAny args[2] = {any_dref(r), any_int(t)};
  call(s, "test.nccl.fill", args, 2);
}

static void every_collective(dvm_session* s, int t, int64_t count) {
  dvm_dref* send = empty(s, t, count);
  dvm_dref* recv = empty(s, t, count);
  dvm_dref* all = empty(s, t, workers * count);
  fill_on_workers(s, send, t);
  for (int64_t kind = 0; kind <= 4; kind++) {
    if (kind == 4 && !kTypes[t].is_float) continue; /* avg: float types */
    DVMAny args[4] = {any_dref(send), kind_shape(kind), any_bool(0), any_dref(recv)};
    call(s, "runtime.disco.allreduce", args, 4);
    CHECK_OK(dvm_any_release(&args[1]));
    expect_values(s, recv, t, ALLREDUCE + (int)kind, count);
  }
  DVMAny gather_all[3] = {any_dref(send), any_bool(0), any_dref(all)};
  call(s, "runtime.disco.allgather", gather_all, 3);
  expect_values(s, all, t, ALLGATHER, count);
  DVMAny bcast[3] = {any_dref(send), any_bool(0), any_dref(recv)};
  call(s, "runtime.disco.broadcast_from_worker0", bcast, 3);
  expect_values(s, recv, t, BROADCAST, count);
  fill_on_workers(s, all, t);
  DVMAny scatter[3] = {any_dref(all), any_bool(0), any_dref(recv)};
  call(s, "runtime.disco.scatter_from_worker0", scatter, 3);
  expect_values(s, recv, t, SCATTER, count);
  DVMAny gather[3] = {any_dref(send), any_bool(0), any_dref(all)};
  call(s, "runtime.disco.gather_to_worker0", gather, 3);
  expect_values(s, all, t, GATHER, count);
  call(s, "runtime.disco.barrier", NULL, 0);
  CHECK_OK(dvm_session_sync_all(s));
  dvm_dref_free(send), dvm_dref_free(recv), dvm_dref_free(all);
}

/* A copy to worker 0, an allreduce and a copy back, with no sync between them. */
static void ordered_with_copies(dvm_session* s) {
  enum { N = 4096 };
  static float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)(i % 97);
  int64_t n = N;
  DLTensor host_in = {in, kHost, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  DLTensor host_out = {out, kHost, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  dvm_dref* send = empty(s, FLOAT32, N);
  dvm_dref* recv = empty(s, FLOAT32, N);
  fill_on_workers(s, send, FLOAT32); /* the other workers' parts */
  CHECK_OK(dvm_session_copy_to_worker0(s, &host_in, send));
  DVMAny args[4] = {any_dref(send), kind_shape(0), any_bool(0), any_dref(recv)};
  call(s, "runtime.disco.allreduce", args, 4);
  CHECK_OK(dvm_any_release(&args[1]));
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_out, recv));
  int wrong = 0;
  for (int i = 0; i < N; i++) {
    double want = in[i];
    for (int32_t w = 1; w < workers; w++) want += value(w, i);
    wrong += out[i] != (float)want;
  }
  if (wrong) fprintf(stderr, "copy, allreduce, copy back: %d of %d elements wrong\n", wrong, N);
  CHECK(wrong == 0);
  dvm_dref_free(send), dvm_dref_free(recv);
}

static void misuse(dvm_session* s, const char* kind) {
  /* CPU tensors: refused on every worker, reported by the next sync. */
  int64_t four = 4;
  DVMAny on_cpu[3] = {any_none(), any_dtype(kTypes[FLOAT32].dtype), any_of(kDVMDevice)};
  on_cpu[2].v_device = kHost;
  CHECK_OK(dvm_shape_new(&four, 1, &on_cpu[0]));
  dvm_dref* f = session_func(s, "runtime.disco.empty");
  dvm_dref* host = broadcast(s, f, on_cpu, 3);
  dvm_dref_free(f);
  CHECK_OK(dvm_any_release(&on_cpu[0]));
  DVMAny args[4] = {any_dref(host), kind_shape(0), any_bool(0), any_dref(host)};
  call(s, "runtime.disco.allreduce", args, 4);
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR,
                "NCCL works on CUDA tensors (kDLCUDA = 2), not device type 1");
  dvm_dref_free(host);

  /* A recv buffer of the wrong size. */
  dvm_dref* send = empty(s, FLOAT32, 4);
  dvm_dref* recv = empty(s, FLOAT32, 5);
  args[0] = any_dref(send), args[3] = any_dref(recv);
  call(s, "runtime.disco.allreduce", args, 4);
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR,
                "allreduce: the recv buffer (5 float32) must hold as many elements as the "
                "other (4 float32)");
  CHECK_OK(dvm_any_release(&args[1]));
  dvm_dref_free(send), dvm_dref_free(recv);

  /* Device ids that are not the workers', and the CPU backend on GPU workers. */
  int32_t ids[4] = {5, 6, 7, 8};
  EXPECT_STATUS(dvm_session_init_ccl(s, "nccl", ids, workers), DVM_VALUE_ERROR,
                "device_ids[0] is 5 but worker 0 runs on CUDA device 0");
  EXPECT_STATUS(dvm_session_init_ccl(s, "cpu", NULL, 0), DVM_VALUE_ERROR,
                "the cpu backend needs every worker on the CPU");

  /* Two workers on one GPU (of one machine: each node's workers have GPUs of their own). */
  if (strcmp(kind, "nodes") == 0) return;
  DLDevice same[2] = {kGpu0, kGpu0};
  dvm_session* shared = start_session(kind, 2, same, 60000);
  EXPECT_STATUS(dvm_session_init_ccl(shared, "nccl", NULL, 0), DVM_VALUE_ERROR,
                "workers 0 and 1 share CUDA device 0: NCCL needs a GPU of its own");
  finish_session(shared);
}

/* Every test on a session of `kind`; 77 when NCCL cannot be loaded, 1 when init_ccl fails. */
static int run(const char* kind, int32_t gpus) {
  int nodes = strcmp(kind, "nodes") == 0;
  if (nodes && gpus < 2) {
    printf("cuda_nccl: nodes: skipped (two nodes are two ranks, and NCCL needs a GPU for each; "
           "this machine has %d)\n",
           (int)gpus);
    return 0;
  }
  workers = gpus >= 4 ? 4 : gpus >= 2 ? 2 : 1;
  /* Each node's workers on the GPUs of their index on the node. */
  DLDevice devices[4];
  for (int32_t w = 0; w < workers; w++) {
    devices[w] = (DLDevice){kDLCUDA, nodes ? w % (workers / 2) : w};
  }
  dvm_session* s = start_session(kind, workers, devices, 60000);
  int nccl = start_nccl(s, "cuda_nccl", kind);
  if (nccl != 0) return nccl;

  for (int t = 0; t < TYPES; t++) {
    every_collective(s, t, 1);
    every_collective(s, t, 1000);
  }
  every_collective(s, FLOAT32, 1 << 20);
  ordered_with_copies(s);
  misuse(s, kind);
  /* Again: the new communicators replace the old ones on every worker. */
  CHECK_OK(dvm_session_init_ccl(s, "nccl", NULL, 0));
  every_collective(s, FLOAT32, 1000);

  CHECK_OK(dvm_session_sync_all(s));
  expect_no_live_registers(s);
  finish_session(s);
  printf("cuda_nccl: %d worker %s on %d GPU(s), one rank each: every collective, ten dtypes, "
         "1 to 2^20 elements, matched the reference%s\n",
         (int)workers, kind, (int)gpus,
         workers == 1 ? " (single rank: groups and transfers between workers need 2+ GPUs)"
                      : "");
  return 0;
}

/* `cuda_nccl [threads|processes|nodes]`: the tests on worker threads, worker processes, two
 * nodes, or (no argument) all three. Started as a worker process by its own controller, it
 * serves it; started as `cuda_nccl node HOST PORT WORKERS`, it is a node. */
int main(int argc, char** argv) {
  register_c("test.nccl.fill", fill_values);
  register_c("test.nccl.check", check_values);
  int served = serve_unless_controller(argc, argv);
  if (served >= 0) return served;

  int32_t gpus = require_cuda("cuda_nccl");
  for (int k = 0; k < 3; k++) {
    if (!kind_asked(argc, argv, kSessionKinds[k])) continue;
    int ran = run(kSessionKinds[k], gpus);
    if (ran != 0) return ran;
  }
  return check_finish();
}
