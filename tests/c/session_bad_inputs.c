/*
 * Bad inputs to the session, worker and DRef functions: each returns its documented status,
 * with the matching error kind and a message that names what was wrong, writes nothing to its
 * outputs, and leaves the session usable (checked after every group).
 */
#include "session_check.h"

static const DLDataType kF32 = {kDLFloat, 32, 1};
static const DLDataType kI32 = {kDLInt, 32, 1};
static const DLDevice kCPU = {kDLCPU, 0};

/* The session still answers: a broadcast runs on every worker and every wait succeeds. */
static void check_usable(dvm_session* s, const char* file, int line) {
  dvm_dref* rank;
  check_ok(dvm_session_get_global_func(s, "runtime.disco.worker_rank", &rank), file, line,
           "get_global_func after bad inputs");
  dvm_dref* ranks;
  check_ok(dvm_session_call(s, rank, NULL, 0, &ranks), file, line, "call after bad inputs");
  for (int32_t w = 0; w < dvm_session_num_workers(s); w++) {
    if (check_int_on(ranks, w, file, line) != w) check_fail(file, line, "rank after bad inputs");
  }
  check_ok(dvm_session_sync_all(s), file, line, "sync_all after bad inputs");
  dvm_dref_free(ranks);
  dvm_dref_free(rank);
}
#define CHECK_USABLE(s) check_usable((s), __FILE__, __LINE__)

/* Starting a session that must fail: nothing is written to `out`. */
static void check_rejected(int32_t workers, int32_t groups, const dvm_session_options* options,
                           dvm_status status, const char* text, const char* file, int line) {
  dvm_session* out = (dvm_session*)&out;
  check_status(dvm_session_new_threaded(workers, groups, options, &out), status, text, file,
               line, "dvm_session_new_threaded");
  if (out != (dvm_session*)&out) check_fail(file, line, "a failed start wrote its output");
}
#define EXPECT_REJECTED(workers, groups, options, status, text) \
  check_rejected((workers), (groups), (options), (status), (text), __FILE__, __LINE__)

static void bad_session_starts(void) {
  EXPECT_REJECTED(0, 1, NULL, DVM_VALUE_ERROR, "num_workers 0 is out of range (1..=1024)");
  EXPECT_REJECTED(-3, 1, NULL, DVM_VALUE_ERROR, "num_workers -3 is out of range (1..=1024)");
  EXPECT_REJECTED(100000, 1, NULL, DVM_VALUE_ERROR,
                  "num_workers 100000 is out of range (1..=1024)");
  EXPECT_REJECTED(4, 3, NULL, DVM_VALUE_ERROR,
                  "num_workers 4 is not a multiple of num_groups 3");
  EXPECT_REJECTED(4, 0, NULL, DVM_VALUE_ERROR, "num_groups 0 is out of range (1..=4)");
  EXPECT_REJECTED(2, -1, NULL, DVM_VALUE_ERROR, "num_groups -1 is out of range (1..=2)");
  EXPECT_REJECTED(2, 3, NULL, DVM_VALUE_ERROR, "num_groups 3 is out of range (1..=2)");
  EXPECT_STATUS(dvm_session_new_threaded(2, 1, NULL, NULL), DVM_VALUE_ERROR, "`out` is NULL");

  dvm_session_options o;
  const int32_t far_cpu[2] = {0, 100000};
  const int32_t bad_cpu[2] = {-2, 0};
  const int32_t unpinned[2] = {-1, -1};
  const DLDevice three[3] = {{kDLCPU, 0}, {kDLCPU, 0}, {kDLCPU, 0}};
  const DLDevice gpu[2] = {{kDLCPU, 0}, {kDLCUDA, 1000}}; /* no machine has GPU 1000 */

  memset(&o, 0, sizeof o);
  o.num_cpu_affinity = 2, o.cpu_affinity = far_cpu;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "cpu_affinity[1] is 100000, out of range");
  o.cpu_affinity = bad_cpu;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "cpu_affinity[0] is -2 (use -1 for no pinning)");
  o.num_cpu_affinity = 1, o.cpu_affinity = unpinned;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "cpu_affinity holds 1 CPU ids for 2 workers");
  o.num_cpu_affinity = 2, o.cpu_affinity = NULL;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "`cpu_affinity` is NULL");
  o.num_cpu_affinity = -1;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "`num_cpu_affinity` is negative (-1)");

  memset(&o, 0, sizeof o);
  o.num_devices = 3, o.devices = three;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "devices holds 3 devices for 2 workers");
  o.num_devices = 2, o.devices = NULL;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "`devices` is NULL");
  o.devices = gpu;
  EXPECT_REJECTED(2, 1, &o, DVM_DEVICE_UNAVAILABLE,
                  "devices[1]: CUDA device 1000: ");

  memset(&o, 0, sizeof o);
  o.timeout_ms = -5;
  EXPECT_REJECTED(2, 1, &o, DVM_VALUE_ERROR, "timeout_ms is negative (-5)");

  /* Good options of each kind start a working session. */
  const int32_t pinned[2] = {-1, 0};
  const DLDevice cpus[2] = {{kDLCPU, 0}, {kDLCPU, 0}};
  memset(&o, 0, sizeof o);
  o.timeout_ms = 60000;
  o.spin_us = -1; /* park at once */
  o.num_cpu_affinity = 2, o.cpu_affinity = pinned;
  o.num_devices = 2, o.devices = cpus;
  dvm_session* s;
  CHECK_OK(dvm_session_new_threaded(2, 2, &o, &s));
  CHECK_USABLE(s);
  dvm_session_free(s);
}

static void workers_out_of_range(dvm_session* s, dvm_dref* ranks) {
  const char* seven = "worker 7 out of range (session has 2 workers)";
  dvm_worker* w = (dvm_worker*)&w;
  DVMAny v = any_sentinel();
  int64_t live = -5;
  EXPECT_STATUS(dvm_session_sync_worker(s, 7), DVM_INDEX_ERROR, seven);
  EXPECT_STATUS(dvm_session_sync_worker(s, 2), DVM_INDEX_ERROR,
                "worker 2 out of range (session has 2 workers)");
  EXPECT_STATUS(dvm_session_sync_worker(s, -1), DVM_INDEX_ERROR,
                "worker -1 out of range (session has 2 workers)");
  EXPECT_STATUS(dvm_session_worker(s, 7, &w), DVM_INDEX_ERROR, seven);
  CHECK(w == (dvm_worker*)&w);
  EXPECT_STATUS(dvm_dref_get(ranks, 7, &v), DVM_INDEX_ERROR, seven);
  CHECK(is_sentinel(&v));
  DVMAny one = any_int(1);
  EXPECT_STATUS(dvm_dref_set(ranks, 7, &one), DVM_INDEX_ERROR, seven);
  EXPECT_STATUS(dvm_session_live_registers(s, 7, &live), DVM_INDEX_ERROR, seven);
  CHECK(live == -5);
  CHECK(int_on(ranks, 1) == 1); /* the failed set changed nothing */
  CHECK_USABLE(s);
}

static void null_handles(dvm_session* s, dvm_dref* rank, dvm_dref* ranks, dvm_dref* tensor) {
  dvm_dref* out = (dvm_dref*)&out;
  dvm_worker* w = (dvm_worker*)&w;
  DVMAny v = any_sentinel();
  int64_t live = -5;
  float data[6] = {0};
  int64_t dims[2] = {2, 3};
  DLTensor host = {data, kCPU, 2, kF32, dims, NULL, 0};
  const DVMAny one = any_int(1);

  CHECK(dvm_session_num_workers(NULL) == -1);
  EXPECT_STATUS(dvm_session_get_global_func(NULL, "x", &out), DVM_VALUE_ERROR,
                "`session` is NULL");
  EXPECT_STATUS(dvm_session_get_global_func(s, NULL, &out), DVM_VALUE_ERROR, "`name` is NULL");
  EXPECT_STATUS(dvm_session_get_global_func(s, "runtime.disco.worker_rank", NULL),
                DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_session_call(NULL, rank, NULL, 0, &out), DVM_VALUE_ERROR,
                "`session` is NULL");
  EXPECT_STATUS(dvm_session_call(s, NULL, NULL, 0, &out), DVM_VALUE_ERROR, "`func` is NULL");
  EXPECT_STATUS(dvm_session_call(s, rank, NULL, 1, &out), DVM_VALUE_ERROR, "`args` is NULL");
  EXPECT_STATUS(dvm_session_call(s, rank, &one, -1, &out), DVM_VALUE_ERROR,
                "`num_args` is negative (-1)");
  EXPECT_STATUS(dvm_session_call(s, rank, NULL, 0, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_session_sync_worker(NULL, 0), DVM_VALUE_ERROR, "`session` is NULL");
  EXPECT_STATUS(dvm_session_sync_all(NULL), DVM_VALUE_ERROR, "`session` is NULL");
  EXPECT_STATUS(dvm_session_copy_to_worker0(NULL, &host, tensor), DVM_VALUE_ERROR,
                "`session` is NULL");
  EXPECT_STATUS(dvm_session_copy_to_worker0(s, NULL, tensor), DVM_VALUE_ERROR,
                "`host` is NULL");
  EXPECT_STATUS(dvm_session_copy_to_worker0(s, &host, NULL), DVM_VALUE_ERROR, "`dst` is NULL");
  EXPECT_STATUS(dvm_session_copy_from_worker0(NULL, &host, tensor), DVM_VALUE_ERROR,
                "`session` is NULL");
  EXPECT_STATUS(dvm_session_copy_from_worker0(s, NULL, tensor), DVM_VALUE_ERROR,
                "`host` is NULL");
  EXPECT_STATUS(dvm_session_copy_from_worker0(s, &host, NULL), DVM_VALUE_ERROR,
                "`src` is NULL");
  EXPECT_STATUS(dvm_session_live_registers(NULL, 0, &live), DVM_VALUE_ERROR,
                "`session` is NULL");
  EXPECT_STATUS(dvm_session_live_registers(s, 0, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_session_shutdown(NULL), DVM_VALUE_ERROR, "`session` is NULL");
  EXPECT_STATUS(dvm_session_worker(NULL, 0, &w), DVM_VALUE_ERROR, "`session` is NULL");
  EXPECT_STATUS(dvm_session_worker(s, 0, NULL), DVM_VALUE_ERROR, "`out` is NULL");

  dvm_worker* w0;
  CHECK_OK(dvm_session_worker(s, 0, &w0));
  DLDevice device = {kDLCUDA, 99};
  CHECK(dvm_worker_id(NULL) == -1);
  EXPECT_STATUS(dvm_worker_call(NULL, rank, NULL, 0, &out), DVM_VALUE_ERROR, "`worker` is NULL");
  EXPECT_STATUS(dvm_worker_call(w0, NULL, NULL, 0, &out), DVM_VALUE_ERROR, "`func` is NULL");
  EXPECT_STATUS(dvm_worker_call(w0, rank, NULL, 0, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_worker_sync(NULL), DVM_VALUE_ERROR, "`worker` is NULL");
  EXPECT_STATUS(dvm_worker_device(NULL, &device), DVM_VALUE_ERROR, "`worker` is NULL");
  EXPECT_STATUS(dvm_worker_device(w0, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  CHECK(device.device_type == kDLCUDA && device.device_id == 99);
  dvm_worker_free(w0);

  EXPECT_STATUS(dvm_dref_get(NULL, 0, &v), DVM_VALUE_ERROR, "`dref` is NULL");
  EXPECT_STATUS(dvm_dref_get(ranks, 0, NULL), DVM_VALUE_ERROR, "`out` is NULL");
  EXPECT_STATUS(dvm_dref_set(NULL, 0, &one), DVM_VALUE_ERROR, "`dref` is NULL");
  EXPECT_STATUS(dvm_dref_set(ranks, 0, NULL), DVM_VALUE_ERROR, "`value` is NULL");
  CHECK(out == (dvm_dref*)&out && w == (dvm_worker*)&w && is_sentinel(&v) && live == -5);

  /* Freeing NULL is fine. */
  dvm_session_free(NULL);
  dvm_dref_free(NULL);
  dvm_worker_free(NULL);
  CHECK_USABLE(s);
}

static void wrong_handles(dvm_session* s, dvm_dref* rank, dvm_dref* ranks) {
  dvm_dref* out = (dvm_dref*)&out;
  DVMAny v = any_sentinel();
  dvm_worker* w0;
  CHECK_OK(dvm_session_worker(s, 0, &w0));
  dvm_func* c_func;
  CHECK_OK(dvm_func_get_global("runtime.disco.worker_rank", &c_func));

  /* Handles of the wrong kind (every handle is an object, so the library can tell). */
  EXPECT_STATUS(dvm_session_call((dvm_session*)rank, rank, NULL, 0, &out), DVM_TYPE_ERROR,
                "`session` is not a session (it is discovm.DRef)");
  EXPECT_STATUS(dvm_session_call(s, (dvm_dref*)s, NULL, 0, &out), DVM_TYPE_ERROR,
                "`func` is not a DRef (it is discovm.Session)");
  EXPECT_STATUS(dvm_session_call(s, (dvm_dref*)c_func, NULL, 0, &out), DVM_TYPE_ERROR,
                "`func` is not a DRef (it is ffi.Function)");
  EXPECT_STATUS(dvm_session_sync_all((dvm_session*)c_func), DVM_TYPE_ERROR,
                "`session` is not a session (it is ffi.Function)");
  EXPECT_STATUS(dvm_session_sync_worker((dvm_session*)w0, 0), DVM_TYPE_ERROR,
                "`session` is not a session (it is discovm.Worker)");
  EXPECT_STATUS(dvm_worker_sync((dvm_worker*)s), DVM_TYPE_ERROR,
                "`worker` is not a worker (it is discovm.Session)");
  EXPECT_STATUS(dvm_worker_call((dvm_worker*)ranks, rank, NULL, 0, &out), DVM_TYPE_ERROR,
                "`worker` is not a worker (it is discovm.DRef)");
  EXPECT_STATUS(dvm_dref_get((dvm_dref*)w0, 0, &v), DVM_TYPE_ERROR,
                "`dref` is not a DRef (it is discovm.Worker)");
  CHECK(dvm_worker_id((dvm_worker*)s) == -1);
  CHECK(dvm_session_num_workers((dvm_session*)w0) == -1);
  CHECK(out == (dvm_dref*)&out && is_sentinel(&v));

  /* Arguments that cannot be sent: an unknown type index, a borrowed DLTensor*. */
  DVMAny bad = any_of(42);
  EXPECT_STATUS(dvm_session_call(s, rank, &bad, 1, &out), DVM_TYPE_ERROR,
                "`args[0]`: unknown type index 42");
  float data[2] = {0};
  int64_t dims[1] = {2};
  DLTensor dl = {data, kCPU, 1, kF32, dims, NULL, 0};
  DVMAny borrowed[2] = {any_int(1), any_of(kDVMDLTensorPtr)};
  borrowed[1].v_ptr = &dl;
  EXPECT_STATUS(dvm_session_call(s, rank, borrowed, 2, &out), DVM_TYPE_ERROR,
                "`args[1]`: a borrowed DLTensor* cannot be kept");
  EXPECT_STATUS(dvm_dref_set(ranks, 0, &borrowed[1]), DVM_TYPE_ERROR,
                "a borrowed DLTensor* cannot be kept");
  CHECK(out == (dvm_dref*)&out);

  /* A DRef that holds something other than a function, called: the workers say so. */
  dvm_dref* not_called;
  CHECK_OK(dvm_session_call(s, ranks, NULL, 0, &not_called));
  EXPECT_STATUS(dvm_session_sync_worker(s, 0), DVM_WORKER_ERROR,
                "failed: TypeError: expected ffi.Function but got int");
  EXPECT_ERROR("WorkerError", "worker 0: ");
  EXPECT_STATUS(dvm_session_sync_worker(s, 1), DVM_WORKER_ERROR, "worker 1: ");
  dvm_dref_free(not_called);

  dvm_func_free(c_func);
  dvm_worker_free(w0);
  CHECK_USABLE(s);
}

static void drefs_of_another_session(dvm_session* s, dvm_dref* tensor) {
  dvm_session* other = new_session(1);
  dvm_dref* other_rank = session_func(other, "runtime.disco.worker_rank");
  dvm_dref* other_ranks = broadcast(other, other_rank, NULL, 0);
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* out = (dvm_dref*)&out;

  EXPECT_STATUS(dvm_session_call(s, other_rank, NULL, 0, &out), DVM_VALUE_ERROR,
                "`func` is a DRef of another session");
  DVMAny args[2] = {any_int(1), any_dref(other_ranks)};
  EXPECT_STATUS(dvm_session_call(s, rank, args, 2, &out), DVM_VALUE_ERROR,
                "`args[1]` is a DRef of another session");
  dvm_worker* w1;
  CHECK_OK(dvm_session_worker(s, 1, &w1));
  EXPECT_STATUS(dvm_worker_call(w1, other_rank, NULL, 0, &out), DVM_VALUE_ERROR,
                "`func` is a DRef of another session");
  CHECK(out == (dvm_dref*)&out);
  dvm_worker_free(w1);

  float data[6] = {0};
  int64_t dims[2] = {2, 3};
  DLTensor host = {data, kCPU, 2, kF32, dims, NULL, 0};
  EXPECT_STATUS(dvm_session_copy_to_worker0(other, &host, tensor), DVM_VALUE_ERROR,
                "`dst` is a DRef of another session");
  EXPECT_STATUS(dvm_session_copy_from_worker0(other, &host, tensor), DVM_VALUE_ERROR,
                "`src` is a DRef of another session");

  dvm_dref_free(rank);
  dvm_dref_free(other_ranks);
  dvm_dref_free(other_rank);
  CHECK_USABLE(other);
  expect_no_live_registers(other);
  dvm_session_free(other);
  CHECK_USABLE(s);
}

/* dvm_session_copy_to_worker0 with copy_from's signature, to run both through one table. */
static dvm_status copy_to(dvm_session* s, DLTensor* host, const dvm_dref* dst) {
  return dvm_session_copy_to_worker0(s, host, dst);
}

static void bad_host_tensors(dvm_session* s, dvm_dref* tensor, dvm_dref* ranks) {
  float data[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int64_t dims[2] = {2, 3};
  int64_t wrong_dims[2] = {3, 2};
  int64_t flat[1] = {6};
  int64_t column_major[2] = {1, 2};
  DLTensor wrong_shape = {data, kCPU, 2, kF32, wrong_dims, NULL, 0};
  DLTensor wrong_ndim = {data, kCPU, 1, kF32, flat, NULL, 0};
  DLTensor wrong_dtype = {data, kCPU, 2, kI32, dims, NULL, 0};
  DLTensor strided = {data, kCPU, 2, kF32, dims, column_major, 0};
  DLTensor on_gpu = {data, {kDLCUDA, 0}, 2, kF32, dims, NULL, 0};
  DLTensor no_data = {NULL, kCPU, 2, kF32, dims, NULL, 0};
  DLTensor good = {data, kCPU, 2, kF32, dims, NULL, 0};

  for (int direction = 0; direction < 2; direction++) {
    dvm_status (*copy)(dvm_session*, DLTensor*, const dvm_dref*) =
        direction == 0 ? copy_to : dvm_session_copy_from_worker0;
    EXPECT_STATUS(copy(s, &wrong_shape, tensor), DVM_VALUE_ERROR,
                  "host tensor [3, 2] float32 does not match the remote tensor [2, 3] float32");
    EXPECT_STATUS(copy(s, &wrong_ndim, tensor), DVM_VALUE_ERROR,
                  "host tensor [6] float32 does not match the remote tensor [2, 3] float32");
    EXPECT_STATUS(copy(s, &wrong_dtype, tensor), DVM_VALUE_ERROR,
                  "host tensor [2, 3] int32 does not match the remote tensor [2, 3] float32");
    EXPECT_STATUS(copy(s, &strided, tensor), DVM_VALUE_ERROR,
                  "the host tensor is not contiguous (row-major compact)");
    EXPECT_STATUS(copy(s, &on_gpu, tensor), DVM_VALUE_ERROR,
                  "the host tensor must be on kDLCPU (1), not device type 2");
    EXPECT_STATUS(copy(s, &no_data, tensor), DVM_VALUE_ERROR, "data is NULL");
    /* A register that holds no tensor on worker 0. */
    EXPECT_STATUS(copy(s, &good, ranks), DVM_WORKER_ERROR,
                  "worker 0 failed: TypeError: expected ffi.Tensor but got int");
    /* The failed copies from worker 0 wrote nothing. */
    int untouched = 1;
    for (int i = 0; i < 8; i++) untouched &= data[i] == -1;
    CHECK(untouched);
  }
  /* The tensor is still there, and copies work. */
  float in[6] = {1, 2, 3, 4, 5, 6};
  float back[6] = {0};
  DLTensor host_in = {in, kCPU, 2, kF32, dims, NULL, 0};
  DLTensor host_back = {back, kCPU, 2, kF32, dims, NULL, 0};
  CHECK_OK(dvm_session_copy_to_worker0(s, &host_in, tensor));
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_back, tensor));
  CHECK(memcmp(in, back, sizeof in) == 0);
  CHECK_USABLE(s);
}

/* init_ccl: backends, device ids, NULLs. The session stays usable, and "cpu" works after. */
static void bad_init_ccl(dvm_session* s) {
  int32_t ids[3] = {0, 1, 2};
  EXPECT_STATUS(dvm_session_init_ccl(NULL, "cpu", NULL, 0), DVM_VALUE_ERROR, "`session` is NULL");
  EXPECT_STATUS(dvm_session_init_ccl(s, NULL, NULL, 0), DVM_VALUE_ERROR, "`backend` is NULL");
  EXPECT_STATUS(dvm_session_init_ccl(s, "gloo", NULL, 0), DVM_VALUE_ERROR,
                "unknown collective backend \"gloo\"");
  EXPECT_STATUS(dvm_session_init_ccl(s, "nccl", NULL, 0), DVM_DEVICE_UNAVAILABLE,
                "the nccl backend needs a GPU for each worker and NCCL: ");
  EXPECT_STATUS(dvm_session_init_ccl(s, "cpu", ids, 3), DVM_VALUE_ERROR,
                "device_ids holds 3 device ids for 2 workers");
  EXPECT_STATUS(dvm_session_init_ccl(s, "cpu", NULL, 2), DVM_VALUE_ERROR, "`device_ids` is NULL");
  EXPECT_STATUS(dvm_session_init_ccl(s, "cpu", ids, -1), DVM_VALUE_ERROR, "`n` is negative (-1)");
  CHECK_USABLE(s);
  CHECK_OK(dvm_session_init_ccl(s, "cpu", ids, 2));
}

int main(void) {
  bad_session_starts();

  dvm_session* s = new_session(2);
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* ranks = broadcast(s, rank, NULL, 0);
  int64_t dims[2] = {2, 3};
  DVMAny empty_args[4] = {any_none(), any_dtype(kF32), any_none(), any_bool(1)};
  CHECK_OK(dvm_shape_new(dims, 2, &empty_args[0]));
  dvm_dref* empty = session_func(s, "runtime.disco.empty");
  dvm_dref* tensor = broadcast(s, empty, empty_args, 4);
  CHECK_OK(dvm_any_release(&empty_args[0]));

  workers_out_of_range(s, ranks);
  bad_init_ccl(s);
  null_handles(s, rank, ranks, tensor);
  wrong_handles(s, rank, ranks);
  drefs_of_another_session(s, tensor);
  bad_host_tensors(s, tensor, ranks);

  dvm_dref_free(tensor);
  dvm_dref_free(empty);
  dvm_dref_free(ranks);
  dvm_dref_free(rank);
  expect_no_live_registers(s);
  CHECK_OK(dvm_session_shutdown(s));
  dvm_session_free(s);
  return check_finish();
}
