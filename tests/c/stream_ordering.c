/*
 * Streams and tensors from C: copies on one stream run in order, copies on two streams that
 * share tensors are ordered by those tensors (soft sync), dvm_stream_wait orders streams,
 * synchronous reads and writes see every earlier copy, tensors released while copies use
 * them stay alive until the copies ran (DLPack deleters run exactly once, afterwards), and a
 * DLPack export waits for the copies queued into its tensor.
 */
#include "check.h"

static const DLDevice cpu = {kDLCPU, 0};
static const DLDataType i64 = {kDLInt, 64, 1};

static dvm_tensor* new_tensor(int64_t n) {
  dvm_tensor* t = NULL;
  CHECK_OK(dvm_tensor_empty(&n, 1, i64, cpu, &t));
  return t;
}

static int64_t read_first(dvm_tensor* t) {
  int64_t value = -1;
  CHECK_OK(dvm_tensor_read(t, &value, sizeof value));
  return value;
}

/* A chain of copies that alternates between two streams: every link must see the one before. */
static void chain_alternates_streams(void) {
  enum { LINKS = 2000 };
  dvm_stream* a = NULL;
  dvm_stream* b = NULL;
  CHECK_OK(dvm_stream_new(cpu, &a));
  CHECK_OK(dvm_stream_new(cpu, &b));
  dvm_tensor* first = new_tensor(4);
  int64_t values[4] = {11, -22, 33, -44};
  CHECK_OK(dvm_tensor_write(first, values, sizeof values));
  dvm_tensor* previous = first;
  for (int i = 0; i < LINKS; i++) {
    dvm_tensor* next = new_tensor(4);
    CHECK_OK(dvm_tensor_copy(next, previous, i % 2 ? b : a));
    dvm_tensor_free(previous); /* still alive: the queued copy holds it */
    previous = next;
  }
  int64_t out[4] = {0, 0, 0, 0};
  CHECK_OK(dvm_tensor_read(previous, out, sizeof out));
  CHECK(memcmp(out, values, sizeof out) == 0);
  dvm_tensor_free(previous);
  CHECK_OK(dvm_stream_sync(a));
  CHECK_OK(dvm_stream_sync(b));
  dvm_stream_free(a);
  dvm_stream_free(b);
}

/* Ping-pong: the host writes, one stream copies, the host reads, the other stream copies back. */
static void ping_pong_with_the_host(void) {
  dvm_stream* streams[2] = {NULL, NULL};
  CHECK_OK(dvm_stream_new(cpu, &streams[0]));
  CHECK_OK(dvm_stream_new(cpu, &streams[1]));
  dvm_tensor* x = new_tensor(1);
  dvm_tensor* y = new_tensor(1);
  int mismatches = 0;
  for (int64_t round = 0; round < 10000; round++) {
    CHECK_OK(dvm_tensor_write(x, &round, sizeof round));
    CHECK_OK(dvm_tensor_copy(y, x, streams[round % 2]));
    CHECK_OK(dvm_tensor_copy(x, y, streams[(round + 1) % 2]));
    if (read_first(x) != round) mismatches++;
  }
  CHECK(mismatches == 0);
  CHECK(read_first(y) == 9999);
  dvm_tensor_free(x);
  dvm_tensor_free(y);
  dvm_stream_free(streams[0]);
  dvm_stream_free(streams[1]);
}

/* dvm_stream_wait: ordering with no tensor in common is still accepted and harmless. */
static void stream_wait_and_sync(void) {
  dvm_stream* a = NULL;
  dvm_stream* b = NULL;
  CHECK_OK(dvm_stream_new(cpu, &a));
  CHECK_OK(dvm_stream_new(cpu, &b));
  dvm_tensor* src = new_tensor(256);
  dvm_tensor* dst = new_tensor(256);
  int64_t seven = 7;
  CHECK_OK(dvm_tensor_write(src, &seven, sizeof seven));
  CHECK_OK(dvm_tensor_copy(dst, src, a));
  CHECK_OK(dvm_stream_wait(b, a));
  CHECK_OK(dvm_stream_wait(b, b)); /* a stream waiting for itself: nothing to do */
  CHECK_OK(dvm_stream_sync(b));
  CHECK_OK(dvm_stream_sync(a));
  CHECK(read_first(dst) == 7);
  dvm_tensor_free(src);
  dvm_tensor_free(dst);
  dvm_stream_free(a);
  dvm_stream_free(b);
}

/* A DLPack tensor given to the library, copied from, and released at once. */
static int deleted;
static int64_t dlpack_data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static int64_t dlpack_shape[1] = {8};
static void count_delete(DLManagedTensorVersioned* self) {
  (void)self;
  deleted++;
}

static void released_tensors_live_until_copied(void) {
  DLManagedTensorVersioned managed;
  memset(&managed, 0, sizeof managed);
  managed.version.major = 1;
  managed.deleter = count_delete;
  managed.dl_tensor.data = dlpack_data;
  managed.dl_tensor.device = cpu;
  managed.dl_tensor.ndim = 1;
  managed.dl_tensor.dtype = i64;
  managed.dl_tensor.shape = dlpack_shape;
  dvm_tensor* borrowed = NULL;
  CHECK_OK(dvm_tensor_from_dlpack(&managed, &borrowed));
  dvm_stream* s = NULL;
  CHECK_OK(dvm_stream_new(cpu, &s));
  dvm_tensor* dst = new_tensor(8);
  for (int i = 0; i < 100; i++) CHECK_OK(dvm_tensor_copy(dst, borrowed, s));
  dvm_tensor_free(borrowed);
  CHECK_OK(dvm_stream_sync(s));
  CHECK(deleted == 1);
  int64_t out[8];
  CHECK_OK(dvm_tensor_read(dst, out, sizeof out));
  CHECK(memcmp(out, dlpack_data, sizeof out) == 0);

  /* The other way: an export keeps the tensor alive until its deleter runs. */
  DLManagedTensorVersioned* exported = NULL;
  CHECK_OK(dvm_tensor_to_dlpack(dst, &exported));
  dvm_tensor_free(dst);
  CHECK(((int64_t*)exported->dl_tensor.data)[7] == 8);
  exported->deleter(exported);

  /* Freeing a stream with queued work finishes the work first. */
  dvm_tensor* a = new_tensor(1024);
  dvm_tensor* b = new_tensor(1024);
  int64_t five = 5;
  CHECK_OK(dvm_tensor_write(a, &five, sizeof five));
  for (int i = 0; i < 500; i++) CHECK_OK(dvm_tensor_copy(b, a, s));
  dvm_stream_free(s);
  const DLTensor* view = dvm_tensor_dl(b);
  CHECK(((const int64_t*)view->data)[0] == 5);
  dvm_tensor_free(a);
  dvm_tensor_free(b);
}

/* A DLPack consumer takes no part in the streams' ordering: an export waits for the copies
 * queued into the tensor, so the consumer finds their bytes. */
static void an_export_waits_for_queued_copies(void) {
  enum { N = 1 << 20, COPIES = 8 };
  dvm_stream* s = NULL;
  CHECK_OK(dvm_stream_new(cpu, &s));
  int64_t* values = malloc(N * sizeof *values);
  for (int64_t i = 0; i < N; i++) values[i] = i * 7 + 1;
  dvm_tensor* src = new_tensor(N);
  CHECK_OK(dvm_tensor_write(src, values, N * sizeof *values));
  for (int round = 0; round < 4; round++) {
    dvm_tensor* dst = new_tensor(N);
    for (int i = 0; i < COPIES; i++) CHECK_OK(dvm_tensor_copy(dst, src, s));
    DLManagedTensorVersioned* exported = NULL;
    CHECK_OK(dvm_tensor_to_dlpack(dst, &exported));
    CHECK(memcmp(exported->dl_tensor.data, values, N * sizeof *values) == 0);
    exported->deleter(exported);
    dvm_tensor_free(dst);
  }
  free(values);
  dvm_tensor_free(src);
  CHECK_OK(dvm_stream_sync(s));
  dvm_stream_free(s);
}

int main(void) {
  chain_alternates_streams();
  ping_pong_with_the_host();
  stream_wait_and_sync();
  released_tensors_live_until_copied();
  an_export_waits_for_queued_copies();
  return check_finish();
}
