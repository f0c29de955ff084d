/*
 * Sessions driven from C: a C function registered globally and broadcast to every worker, with
 * each worker's result read back; DRef arguments replaced by each worker's own value; calls on
 * one worker; the worker's identity seen from inside a callback (and off worker threads); the
 * runtime.disco.* built-ins; a tensor copied to worker 0 and back; and empty register files
 * once every DRef is freed.
 */
#include "session_check.h"

/* ---- C callbacks that run on the workers ----------------------------------------------------- */

/* scale(x) = x * (worker id + 1). */
static int32_t scale(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  int32_t id = dvm_current_worker_id();
  if (id < 0) {
    dvm_error_raise("RuntimeError", "scale must run on a worker");
    return -1;
  }
  if (num_args != 1 || args[0].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "scale takes one Int");
    return -1;
  }
  result->type_index = kDVMInt;
  result->v_int64 = args[0].v_int64 * (id + 1);
  return 0;
}

/* add(a, b) = a + b, for Ints. */
static int32_t add(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self;
  if (num_args != 2 || args[0].type_index != kDVMInt || args[1].type_index != kDVMInt) {
    dvm_error_raise("TypeError", "add takes two Ints");
    return -1;
  }
  result->type_index = kDVMInt;
  result->v_int64 = args[0].v_int64 + args[1].v_int64;
  return 0;
}

/* whoami() = id * 1000 + device_id, after checking that dvm_current_worker_id,
 * dvm_current_worker, dvm_worker_id and dvm_worker_device agree. Off a worker it raises what
 * dvm_current_worker raised. */
static int32_t whoami(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args;
  int32_t id = dvm_current_worker_id();
  dvm_worker* me = NULL;
  if (dvm_current_worker(&me) != DVM_OK) {
    if (id != -1) dvm_error_raise("ValueError", "dvm_current_worker failed on a worker");
    return -1; /* passes dvm_current_worker's error on */
  }
  if (id < 0 || me == NULL || dvm_worker_id(me) != id) {
    dvm_error_raise("ValueError", "dvm_current_worker and dvm_current_worker_id disagree");
    return -1;
  }
  DLDevice device;
  if (dvm_worker_device(me, &device) != DVM_OK) return -1;
  if (device.device_type != kDLCPU) {
    dvm_error_raise("ValueError", "a worker's device is not the CPU");
    return -1;
  }
  /* The handle is borrowed: nothing to free. */
  result->type_index = kDVMInt;
  result->v_int64 = (int64_t)id * 1000 + device.device_id;
  return 0;
}

/* keep_me(): takes a reference to the worker's own handle and keeps it in `kept`. */
static dvm_worker* kept[2];
static int32_t keep_me(void* self, const DVMAny* args, int32_t num_args, DVMAny* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  dvm_worker* me;
  if (dvm_current_worker(&me) != DVM_OK) return -1;
  if (dvm_object_inc_ref(me) != DVM_OK) return -1;
  kept[dvm_worker_id(me)] = me;
  return 0;
}

/* ---- The tests ------------------------------------------------------------------------------- */

static void broadcast_a_c_function(void) {
  dvm_session* s = new_session(3);
  CHECK(dvm_session_num_workers(s) == 3);
  dvm_dref* f = session_func(s, "test.c.scale");
  DVMAny ten = any_int(10);
  dvm_dref* scaled = broadcast(s, f, &ten, 1);
  CHECK_OK(dvm_session_sync_all(s));
  for (int32_t w = 0; w < 3; w++) CHECK(int_on(scaled, w) == 10 * (w + 1));

  /* Results stay readable, and the same function can be broadcast again. */
  DVMAny minus = any_int(-7);
  dvm_dref* again = broadcast(s, f, &minus, 1);
  for (int32_t w = 0; w < 3; w++) {
    CHECK(int_on(again, w) == -7 * (w + 1));
    CHECK(int_on(scaled, w) == 10 * (w + 1));
  }

  /* A register can be set from the host on one worker, in order with earlier calls. */
  DVMAny forty_two = any_int(42);
  CHECK_OK(dvm_dref_set(scaled, 2, &forty_two));
  CHECK(int_on(scaled, 2) == 42);
  CHECK(int_on(scaled, 1) == 20);

  dvm_dref_free(again);
  dvm_dref_free(scaled);
  dvm_dref_free(f);
  end_session(s);
}

static void dref_arguments_become_each_workers_value(void) {
  dvm_session* s = new_session(3);
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* plus = session_func(s, "test.c.add");
  dvm_dref* ranks = broadcast(s, rank, NULL, 0);

  DVMAny args[2] = {any_dref(ranks), any_int(100)};
  dvm_dref* sums = broadcast(s, plus, args, 2);
  for (int32_t w = 0; w < 3; w++) CHECK(int_on(sums, w) == 100 + w);

  /* Both arguments from registers: each worker adds its own two values. */
  DVMAny both[2] = {any_dref(sums), any_dref(ranks)};
  dvm_dref* twice = broadcast(s, plus, both, 2);
  for (int32_t w = 0; w < 3; w++) CHECK(int_on(twice, w) == 100 + 2 * w);

  /* Freeing the argument DRefs right after the call is fine: the call was sent first. */
  dvm_dref* ranks2 = broadcast(s, rank, NULL, 0);
  DVMAny late[2] = {any_dref(ranks2), any_int(1)};
  dvm_dref* after = broadcast(s, plus, late, 2);
  dvm_dref_free(ranks2);
  for (int32_t w = 0; w < 3; w++) CHECK(int_on(after, w) == 1 + w);

  dvm_dref_free(after);
  dvm_dref_free(twice);
  dvm_dref_free(sums);
  dvm_dref_free(ranks);
  dvm_dref_free(plus);
  dvm_dref_free(rank);
  expect_no_live_registers(s);
  dvm_session_free(s);
}

static void a_call_on_one_worker(void) {
  dvm_session* s = new_session(2);
  dvm_worker* w1;
  CHECK_OK(dvm_session_worker(s, 1, &w1));
  CHECK(dvm_worker_id(w1) == 1);
  DLDevice device = {kDLCUDA, 9};
  CHECK_OK(dvm_worker_device(w1, &device));
  CHECK(device.device_type == kDLCPU && device.device_id == 0);

  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* only = NULL;
  CHECK_OK(dvm_worker_call(w1, rank, NULL, 0, &only));
  CHECK_OK(dvm_worker_sync(w1));
  CHECK(int_on(only, 1) == 1);
  /* Worker 0 never ran it: its register is empty there. */
  DVMAny v = any_sentinel();
  EXPECT_STATUS(dvm_dref_get(only, 0, &v), DVM_WORKER_ERROR, "is empty on worker 0");
  CHECK(is_sentinel(&v));

  /* A DRef argument on a one-worker call is that worker's value. */
  dvm_dref* plus = session_func(s, "test.c.add");
  DVMAny args[2] = {any_dref(only), any_int(5)};
  dvm_dref* sum = NULL;
  CHECK_OK(dvm_worker_call(w1, plus, args, 2, &sum));
  CHECK(int_on(sum, 1) == 6);
  CHECK_OK(dvm_session_sync_all(s));

  /* The worker handle keeps the session alive after the session handle is gone. */
  dvm_dref_free(sum);
  dvm_dref_free(plus);
  dvm_dref_free(only);
  dvm_dref_free(rank);
  expect_no_live_registers(s);
  dvm_session_free(s);
  CHECK(dvm_worker_id(w1) == 1);
  CHECK_OK(dvm_worker_sync(w1));
  dvm_worker_free(w1);
}

static void the_current_worker_inside_a_callback(void) {
  /* Off worker threads there is no current worker. */
  CHECK(dvm_current_worker_id() == -1);
  dvm_worker* none = (dvm_worker*)&none;
  EXPECT_STATUS(dvm_current_worker(&none), DVM_RUNTIME_ERROR, "off a worker thread");
  CHECK(none == (dvm_worker*)&none);
  EXPECT_STATUS(dvm_current_worker(NULL), DVM_VALUE_ERROR, "`out` is NULL");

  /* The same callback called on this thread passes that error on. */
  dvm_func* direct;
  CHECK_OK(dvm_func_get_global("test.c.whoami", &direct));
  DVMAny result = any_none();
  EXPECT_STATUS(dvm_func_call(direct, NULL, 0, &result), DVM_RUNTIME_ERROR,
                "dvm_current_worker called off a worker thread");
  dvm_func_free(direct);

  /* On workers, with their devices given in the options (the host is one device, id 0, that
   * workers share; an id the host does not have is refused). */
  const DLDevice devices[4] = {{kDLCPU, 0}, {kDLCPU, 0}, {kDLCPU, 0}, {kDLCPU, 0}};
  dvm_session_options options;
  memset(&options, 0, sizeof options);
  options.num_devices = 4;
  options.devices = devices;
  dvm_session* s;
  const DLDevice other_host[4] = {{kDLCPU, 0}, {kDLCPU, 1}, {kDLCPU, 0}, {kDLCPU, 0}};
  options.devices = other_host;
  EXPECT_STATUS(dvm_session_new_threaded(4, 2, &options, &s), DVM_VALUE_ERROR,
                "devices[1]: CPU device id 1 is out of range (the host is device 0)");
  options.devices = devices;
  CHECK_OK(dvm_session_new_threaded(4, 2, &options, &s));
  dvm_dref* f = session_func(s, "test.c.whoami");
  dvm_dref* ids = broadcast(s, f, NULL, 0);
  for (int32_t w = 0; w < 4; w++) {
    CHECK(int_on(ids, w) == w * 1000);
    dvm_worker* worker;
    CHECK_OK(dvm_session_worker(s, w, &worker));
    DLDevice device;
    CHECK_OK(dvm_worker_device(worker, &device));
    CHECK(device.device_type == kDLCPU && device.device_id == 0);
    dvm_worker_free(worker);
  }
  /* ... and through the built-in that Disco's workers use. */
  dvm_dref* device_fn = session_func(s, "runtime.disco.device");
  dvm_dref* device_of = broadcast(s, device_fn, NULL, 0);
  for (int32_t w = 0; w < 4; w++) {
    DVMAny v = any_none();
    CHECK_OK(dvm_dref_get(device_of, w, &v));
    CHECK(v.type_index == kDVMDevice);
    CHECK(v.v_device.device_type == kDLCPU && v.v_device.device_id == 0);
  }
  dvm_dref_free(device_of);
  dvm_dref_free(device_fn);
  dvm_dref_free(ids);
  dvm_dref_free(f);
  end_session(s);
}

static void a_worker_handle_kept_from_a_callback(void) {
  dvm_session* s = new_session(2);
  dvm_dref* keep = session_func(s, "test.c.keep_me");
  dvm_dref_free(broadcast(s, keep, NULL, 0));
  CHECK_OK(dvm_session_sync_all(s));
  CHECK(kept[0] != NULL && kept[1] != NULL);
  if (kept[0] == NULL || kept[1] == NULL) return;
  CHECK(dvm_worker_id(kept[0]) == 0 && dvm_worker_id(kept[1]) == 1);

  /* While the session lives, the handle works from the host like any other. */
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* on1 = NULL;
  CHECK_OK(dvm_worker_call(kept[1], rank, NULL, 0, &on1));
  CHECK_OK(dvm_worker_sync(kept[1]));
  CHECK(int_on(on1, 1) == 1);
  DLDevice device;
  CHECK_OK(dvm_worker_device(kept[0], &device));
  CHECK(device.device_type == kDLCPU);
  dvm_dref_free(on1);
  dvm_dref_free(rank);
  dvm_dref_free(keep);
  expect_no_live_registers(s);

  /* It does not keep the session alive: once the session is gone, it says so. */
  dvm_session_free(s);
  CHECK(dvm_worker_id(kept[1]) == 1);
  EXPECT_STATUS(dvm_worker_sync(kept[1]), DVM_SESSION_CLOSED, "the worker's session is gone");
  EXPECT_STATUS(dvm_worker_device(kept[0], &device), DVM_SESSION_CLOSED,
                "the worker's session is gone");
  dvm_worker_free(kept[0]);
  dvm_worker_free(kept[1]);
}

static void the_disco_builtins(void) {
  const DLDataType f32 = {kDLFloat, 32, 1};
  dvm_session* s = new_session(3);

  dvm_dref* ids = call_builtin(s, "runtime.disco.worker_id", NULL, 0);
  dvm_dref* ranks = call_builtin(s, "runtime.disco.worker_rank", NULL, 0);
  dvm_dref* sizes = call_builtin(s, "runtime.disco.world_size", NULL, 0);
  dvm_dref* groups = call_builtin(s, "runtime.disco.num_groups", NULL, 0);
  dvm_dref* devices = call_builtin(s, "runtime.disco.device", NULL, 0);
  for (int32_t w = 0; w < 3; w++) {
    DVMAny id = any_none();
    CHECK_OK(dvm_dref_get(ids, w, &id));
    CHECK(id.type_index == kDVMShape); /* Disco's worker_id returns Shape([id]) */
    if (id.type_index == kDVMShape) {
      const DVMShapeCell* shape = CELL(DVMShapeCell, id.v_obj);
      CHECK(shape->size == 1 && shape->data[0] == w);
    }
    CHECK_OK(dvm_any_release(&id));
    CHECK(int_on(ranks, w) == w);
    CHECK(int_on(sizes, w) == 3);
    CHECK(int_on(groups, w) == 1);
    DVMAny device = any_none();
    CHECK_OK(dvm_dref_get(devices, w, &device));
    CHECK(device.type_index == kDVMDevice && device.v_device.device_type == kDLCPU);
  }

  /* empty(shape, dtype, device=None, worker0_only=True): a zeroed tensor on worker 0 only. */
  const int64_t dims[2] = {2, 3};
  DVMAny empty_args[4] = {any_none(), any_dtype(f32), any_none(), any_bool(1)};
  CHECK_OK(dvm_shape_new(dims, 2, &empty_args[0]));
  dvm_dref* tensors = call_builtin(s, "runtime.disco.empty", empty_args, 4);
  DVMAny t = any_none();
  CHECK_OK(dvm_dref_get(tensors, 0, &t));
  CHECK(t.type_index == kDVMTensor);
  if (t.type_index == kDVMTensor) {
    const DLTensor* dl = CELL(DLTensor, t.v_obj);
    CHECK(dl->ndim == 2 && dl->shape[0] == 2 && dl->shape[1] == 3);
    CHECK(dl->dtype.code == kDLFloat && dl->dtype.bits == 32 && dl->dtype.lanes == 1);
    CHECK(dl->device.device_type == kDLCPU);
    const float* data = (const float*)((const char*)dl->data + dl->byte_offset);
    int zeros = 1;
    for (int i = 0; i < 6; i++) zeros &= data[i] == 0.0f;
    CHECK(zeros);
  }
  CHECK_OK(dvm_any_release(&t));
  for (int32_t w = 1; w < 3; w++) {
    DVMAny none = any_sentinel();
    CHECK_OK(dvm_dref_get(tensors, w, &none));
    CHECK(none.type_index == kDVMNone);
  }
  /* Without worker0_only every worker gets one. */
  dvm_dref* everywhere = call_builtin(s, "runtime.disco.empty", empty_args, 2);
  for (int32_t w = 0; w < 3; w++) {
    DVMAny v = any_none();
    CHECK_OK(dvm_dref_get(everywhere, w, &v));
    CHECK(v.type_index == kDVMTensor);
    CHECK_OK(dvm_any_release(&v));
  }
  /* Bad arguments fail on the workers and come back at the next wait. */
  dvm_dref* bad = call_builtin(s, "runtime.disco.empty", empty_args, 1);
  EXPECT_STATUS(dvm_session_sync_worker(s, 0), DVM_WORKER_ERROR,
                "worker 0: `runtime.disco.empty` failed: TypeError");
  EXPECT_STATUS(dvm_session_sync_all(s), DVM_WORKER_ERROR,
                "worker 1: `runtime.disco.empty` failed: TypeError");
  CHECK_OK(dvm_session_sync_all(s)); /* each failure is reported once */

  dvm_dref_free(bad);
  dvm_dref_free(everywhere);
  dvm_dref_free(tensors);
  dvm_dref_free(devices);
  dvm_dref_free(groups);
  dvm_dref_free(sizes);
  dvm_dref_free(ranks);
  dvm_dref_free(ids);
  expect_no_live_registers(s);
  dvm_session_free(s);

  /* In groups, worker0_only means worker 0 of each group, unless in_group is false. */
  dvm_session* grouped;
  CHECK_OK(dvm_session_new_threaded(4, 2, NULL, &grouped));
  dvm_dref* per_group = call_builtin(grouped, "runtime.disco.empty", empty_args, 4);
  DVMAny five[5] = {empty_args[0], empty_args[1], any_none(), any_bool(1), any_bool(0)};
  dvm_dref* global0 = call_builtin(grouped, "runtime.disco.empty", five, 5);
  dvm_dref* num_groups = call_builtin(grouped, "runtime.disco.num_groups", NULL, 0);
  for (int32_t w = 0; w < 4; w++) {
    DVMAny a = any_none(), b = any_none();
    CHECK_OK(dvm_dref_get(per_group, w, &a));
    CHECK_OK(dvm_dref_get(global0, w, &b));
    CHECK(a.type_index == (w == 0 || w == 2 ? kDVMTensor : kDVMNone));
    CHECK(b.type_index == (w == 0 ? kDVMTensor : kDVMNone));
    CHECK(int_on(num_groups, w) == 2);
    CHECK_OK(dvm_any_release(&a));
    CHECK_OK(dvm_any_release(&b));
  }
  dvm_dref_free(num_groups);
  dvm_dref_free(global0);
  dvm_dref_free(per_group);
  expect_no_live_registers(grouped);
  dvm_session_free(grouped);
  CHECK_OK(dvm_any_release(&empty_args[0]));

  /* bind_worker_to_cpu_core(cpu_ids) pins worker i to cpu_ids[i]. */
  dvm_session* pinned = new_session(2);
  const int64_t cpus[2] = {0, 0};
  DVMAny cpu_ids = any_none();
  CHECK_OK(dvm_shape_new(cpus, 2, &cpu_ids));
  dvm_dref* bound = call_builtin(pinned, "runtime.disco.bind_worker_to_cpu_core", &cpu_ids, 1);
  CHECK_OK(dvm_session_sync_all(pinned));
  CHECK_OK(dvm_any_release(&cpu_ids));
  CHECK_OK(dvm_shape_new(cpus, 1, &cpu_ids)); /* no entry for worker 1 */
  dvm_dref* short_ids =
      call_builtin(pinned, "runtime.disco.bind_worker_to_cpu_core", &cpu_ids, 1);
  CHECK_OK(dvm_session_sync_worker(pinned, 0));
  EXPECT_STATUS(dvm_session_sync_worker(pinned, 1), DVM_WORKER_ERROR,
                "worker 1 has no entry in 1 CPU ids");
  CHECK_OK(dvm_any_release(&cpu_ids));
  dvm_dref_free(short_ids);
  dvm_dref_free(bound);
  expect_no_live_registers(pinned);
  dvm_session_free(pinned);

  /* The built-ins are global functions too, but only make sense on a worker. */
  dvm_func* direct;
  CHECK_OK(dvm_func_get_global("runtime.disco.worker_id", &direct));
  DVMAny result = any_sentinel();
  EXPECT_STATUS(dvm_func_call(direct, NULL, 0, &result), DVM_RUNTIME_ERROR,
                "`runtime.disco.worker_id` must run on a session worker thread");
  CHECK(is_sentinel(&result));
  dvm_func_free(direct);
}

static void copy_to_worker0_and_back(void) {
  const DLDataType f32 = {kDLFloat, 32, 1};
  const DLDevice cpu = {kDLCPU, 0};
  dvm_session* s = new_session(2);
  int64_t dims[2] = {2, 3};
  dvm_dref* remote = empty_tensor(s, dims, 2, f32, 1);

  float input[6] = {1.5f, -2.0f, 3.25f, 4.0f, 5.5f, -6.75f};
  float output[6] = {0};
  DLTensor host_in = {input, cpu, 2, f32, dims, NULL, 0};
  DLTensor host_out = {output, cpu, 2, f32, dims, NULL, 0};
  CHECK_OK(dvm_session_copy_to_worker0(s, &host_in, remote));
  /* The copy back returns with the buffer filled: no sync needed. */
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_out, remote));
  CHECK(memcmp(input, output, sizeof input) == 0);

  /* The tensor on worker 0 holds the data too. */
  DVMAny t = any_none();
  CHECK_OK(dvm_dref_get(remote, 0, &t));
  CHECK(t.type_index == kDVMTensor);
  if (t.type_index == kDVMTensor) {
    const DLTensor* dl = CELL(DLTensor, t.v_obj);
    CHECK(memcmp((const char*)dl->data + dl->byte_offset, input, sizeof input) == 0);
  }
  CHECK_OK(dvm_any_release(&t));

  /* Explicit compact strides and a byte offset are fine. */
  int64_t strides[2] = {3, 1};
  float padded[8] = {0};
  DLTensor offset_out = {padded, cpu, 2, f32, dims, strides, 2 * sizeof(float)};
  CHECK_OK(dvm_session_copy_from_worker0(s, &offset_out, remote));
  CHECK(padded[0] == 0.0f && padded[1] == 0.0f);
  CHECK(memcmp(padded + 2, input, sizeof input) == 0);

  /* A copy is ordered after the calls sent before it: overwrite on the worker, then read. */
  float twos[6] = {2, 2, 2, 2, 2, 2};
  DLTensor host_twos = {twos, cpu, 2, f32, dims, NULL, 0};
  CHECK_OK(dvm_session_copy_to_worker0(s, &host_twos, remote));
  CHECK_OK(dvm_session_copy_from_worker0(s, &host_out, remote));
  CHECK(memcmp(twos, output, sizeof twos) == 0);

  dvm_dref_free(remote);
  expect_no_live_registers(s);
  dvm_session_free(s);
}

static void registers_are_empty_once_every_dref_is_freed(void) {
  dvm_session* s = new_session(2);
  dvm_dref* rank = session_func(s, "runtime.disco.worker_rank");
  dvm_dref* kept[50];
  for (int i = 0; i < 50; i++) kept[i] = broadcast(s, rank, NULL, 0);
  for (int32_t w = 0; w < 2; w++) {
    int64_t live = -1;
    CHECK_OK(dvm_session_live_registers(s, w, &live));
    CHECK(live == 51);
  }
  /* A DRef freed through dvm_object_dec_ref is released the same way. */
  CHECK_OK(dvm_object_inc_ref(kept[0]));
  dvm_dref_free(kept[0]);
  CHECK(int_on(kept[0], 1) == 1); /* still alive: one reference left */
  CHECK_OK(dvm_object_dec_ref(kept[0]));
  for (int i = 1; i < 50; i++) dvm_dref_free(kept[i]);
  dvm_dref_free(rank);
  expect_no_live_registers(s);
  dvm_session_free(s);
}

int main(void) {
  register_c("test.c.scale", scale);
  register_c("test.c.add", add);
  register_c("test.c.whoami", whoami);
  register_c("test.c.keep_me", keep_me);

  broadcast_a_c_function();
  dref_arguments_become_each_workers_value();
  a_call_on_one_worker();
  the_current_worker_inside_a_callback();
  a_worker_handle_kept_from_a_callback();
  the_disco_builtins();
  copy_to_worker0_and_back();
  registers_are_empty_once_every_dref_is_freed();
  return check_finish();
}
