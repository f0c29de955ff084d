import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as d from '../src/index.js';

test('tensors and streams', () => {
  const a = d.Tensor.from(new Float64Array([1, 2, 3, 4, 5, 6]), [2, 3]);
  const b = d.Tensor.empty([2, 3], d.dtypes.float64);
  assert.deepEqual(a.shape, [2, 3]);
  assert.deepEqual(a.dtype, d.dtypes.float64);
  assert.deepEqual(a.device, d.cpu);
  const first = new d.Stream(d.cpu);
  const second = new d.Stream();
  first.copy(b, a);
  second.wait(first);
  second.sync();
  assert.deepEqual(Array.from(b.toTypedArray()), [1, 2, 3, 4, 5, 6]);
  assert.equal(b.read(new Float64Array(1))[0], 1);
  assert.throws(() => b.read(new Float64Array(7)), (e) => e instanceof d.ValueError && /56/.test(e.message));
  assert.throws(() => b.read([0]), d.TypeError);
  assert.throws(() => d.Tensor.empty([-1], d.dtypes.float32), d.ValueError);
  assert.throws(() => new d.Stream(new d.Device(99)));
  assert.equal(d.deviceCount(1), 1);
  assert.match(d.version(), /^\d+\.\d+\.\d+/);
  for (const h of [a, b, first, second]) h.close();
  assert.throws(() => b.read(new Float64Array(1)), /closed/);
});

test('tensors cross as arguments and results', async (t) => {
  const name = 'js_test.tensors';
  d.registerGlobal(name, (input) => {
    const v = input.read(new Int32Array(2));
    input.close();
    return d.Tensor.from(new Int32Array([v[0] * 10, v[1] * d.currentWorkerId()]));
  });
  const s = d.Session.threaded(2);
  t.after(() => s.close());
  const fn = s.getGlobalFunc(name);
  const input = d.Tensor.from(new Int32Array([3, 4]));
  const out = s.call(fn, input);
  const tensor = await out.get(1);
  assert.deepEqual(Array.from(tensor.toTypedArray()), [30, 4]);
  assert.ok(d.globalNames().includes(name));
  const f = d.getGlobal(name);
  assert.ok(f instanceof d.Func);
  d.removeGlobal(name);
  assert.throws(() => d.getGlobal(name), d.KeyError);
  for (const h of [fn, input, out, tensor, f]) h.close();
});
