// Copies and collectives, checked on a session of each kind.

import assert from 'node:assert/strict';
import * as d from '../src/index.js';

/** Copies and collectives on a session of `n` CPU workers. */
export async function checkCollectives(s, n) {
  await s.initCCL('cpu');
  const x = s.empty([2, 2], d.dtypes.float32);
  const sum = s.empty([2, 2], d.dtypes.float32);
  await s.copyToWorker0(new Float32Array([1, 2, 3, 4]), [2, 2], x);
  s.broadcastFromWorker0(x, x);
  s.allreduce(x, sum, { op: 'sum' });
  s.barrier();
  await s.syncAll();
  const got = new Float32Array(4);
  await s.copyFromWorker0(got, [2, 2], sum);
  assert.deepEqual(Array.from(got), [n, 2 * n, 3 * n, 4 * n]);
  const all = s.empty([n, 2, 2], d.dtypes.float32);
  s.allgather(sum, all);
  const gathered = new Float32Array(4 * n);
  s.copyFromWorker0Sync(gathered, [n, 2, 2], all);
  assert.equal(gathered[4 * n - 1], 4 * n);
  const tensor = await sum.get(n - 1);
  assert.deepEqual(tensor.shape, [2, 2]);
  assert.deepEqual(Array.from(tensor.toTypedArray()), [n, 2 * n, 3 * n, 4 * n]);
  assert.throws(() => s.copyToWorker0Sync(new Float32Array(3), [2, 2], x), /3 elements/);
  assert.throws(() => s.copyToWorker0Sync([1, 2, 3, 4], [2, 2], x), d.TypeError);
  for (const h of [x, sum, all, tensor]) h.close();
}
