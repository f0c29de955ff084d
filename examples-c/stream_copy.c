/*
 * stream_copy.c: move tensor data with streams. Write a few values into a tensor, queue
 * copies on two streams (the second uses the first one's result, and the library orders them),
 * read the result back synchronously, and see what a bad copy reports.
 *
 * Build and run from the repository root:
 *
 *   cargo build
 *   cc -std=c11 -Iinclude examples-c/stream_copy.c -Ltarget/debug -ldiscovm \
 *      -Wl,-rpath,"$PWD/target/debug" -o stream_copy
 *   ./stream_copy
 */
#include <stdio.h>
#include <stdlib.h>

#include "discovm.h"
#include "example_check.h" /* CHECK(call): stops with the error if a call fails */

int main(void) {
  const DLDevice cpu = {kDLCPU, 0};
  const DLDataType f32 = {kDLFloat, 32, 1};
  const int64_t shape[1] = {4};

  /* Step 1: three tensors of 4 floats each, zero-filled, on the host. */
  dvm_tensor* source = NULL;
  dvm_tensor* middle = NULL;
  dvm_tensor* result = NULL;
  CHECK(dvm_tensor_empty(shape, 1, f32, cpu, &source));
  CHECK(dvm_tensor_empty(shape, 1, f32, cpu, &middle));
  CHECK(dvm_tensor_empty(shape, 1, f32, cpu, &result));

  /* Step 2: write the source synchronously. dvm_tensor_write returns when the bytes are in
   * the tensor, ordered after anything queued on it before. */
  const float values[4] = {1.5f, 2.5f, 3.5f, 4.5f};
  CHECK(dvm_tensor_write(source, values, sizeof values));

  /* Step 3: two streams. Work on one stream runs in the order it was queued. */
  dvm_stream* upload = NULL;
  dvm_stream* compute = NULL;
  CHECK(dvm_stream_new(cpu, &upload));
  CHECK(dvm_stream_new(cpu, &compute));

  /* Step 4: queue copies; both calls return at once. The second copy reads `middle`, which
   * the first writes on the other stream: the library makes `compute` wait for `upload` at
   * that point, without blocking this thread. */
  CHECK(dvm_tensor_copy(middle, source, upload));
  CHECK(dvm_tensor_copy(result, middle, compute));

  /* Step 5: tensors may be freed while copies still use them: they live until the copies ran. */
  dvm_tensor_free(middle);

  /* Step 6: read the result. The read waits for every earlier use of `result` on any stream,
   * so it sees the copies' bytes. nbytes may be smaller than the tensor: the first bytes. */
  float out[4] = {0, 0, 0, 0};
  CHECK(dvm_tensor_read(result, out, sizeof out));
  printf("result: %.1f %.1f %.1f %.1f\n", out[0], out[1], out[2], out[3]);
  float first = 0;
  CHECK(dvm_tensor_read(result, &first, sizeof first));
  printf("first element alone: %.1f\n", first);

  /* Step 7: a bad copy fails at once with a clear error (here: shapes differ). */
  const int64_t other_shape[2] = {2, 2};
  dvm_tensor* square = NULL;
  CHECK(dvm_tensor_empty(other_shape, 2, f32, cpu, &square));
  if (dvm_tensor_copy(square, source, upload) != DVM_OK) {
    printf("as expected, %s: %s\n", dvm_last_error_kind(), dvm_last_error_message());
  }

  /* Step 8: sync each stream (it reports failures of queued work, none here), then free
   * everything. Freeing a stream finishes its queued work first. */
  CHECK(dvm_stream_sync(upload));
  CHECK(dvm_stream_sync(compute));
  dvm_stream_free(upload);
  dvm_stream_free(compute);
  dvm_tensor_free(square);
  dvm_tensor_free(source);
  dvm_tensor_free(result);
  return out[3] == 4.5f ? 0 : 1;
}
