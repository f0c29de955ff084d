import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as d from '../src/index.js';
import { checkCollectives } from './collectives.js';

let registered = 0;
/** Registers `fn` under a name of its own. */
function register(fn) {
  const name = `js_test.${registered++}`;
  d.registerGlobal(name, fn);
  return name;
}

function threaded(t, n) {
  const s = d.Session.threaded(n, { timeoutMs: 60000 });
  t.after(() => s.close());
  return s;
}

test('JS functions run for every worker, which waits for them', async (t) => {
  const s = threaded(t, 4);
  const fn = s.getGlobalFunc(register((x) => x * (d.currentWorkerId() + 1)));
  const out = s.call(fn, 10);
  await s.syncAll();
  for (let w = 0; w < 4; w++) assert.equal(await out.get(w), 10 * (w + 1));
  assert.equal(d.currentWorkerId(), -1);
  out.close();
  fn.close();
});

test('values cross both ways', async (t) => {
  const s = threaded(t, 2);
  const echo = s.getGlobalFunc(register((v) => v));
  const long = 'a longer string '.repeat(4);
  for (const v of [null, true, -7, 2.5, 2n ** 62n, 'short', long, Buffer.from([1, 2, 3]), Buffer.from(long),
    new d.Shape([2, 3]), d.dtypes.float32, d.cpu]) {
    const out = s.call(echo, v);
    assert.deepEqual(await out.get(1), v);
    out.close();
  }
  assert.throws(() => s.call(echo, {}), (e) => e instanceof d.TypeError && /argument 0: a JS Object/.test(e.message));
  // Worker 0 runs its echoes on this thread too: they end before the session closes, which
  // would otherwise wait for them while holding this thread.
  await s.syncAll();
});

test('DRefs as arguments, set, and registers freed', async (t) => {
  const s = threaded(t, 3);
  const inc = s.getGlobalFunc(register((x) => x + 1));
  const rank = s.getGlobalFunc('runtime.disco.worker_rank');
  const ranks = s.call(rank);
  const next = s.call(inc, ranks);
  for (let w = 0; w < 3; w++) assert.equal(await next.get(w), w + 1);
  next.set(2, 'set');
  assert.equal(next.getSync(2), 'set');
  await assert.rejects(next.get(3), d.IndexError);
  for (const h of [inc, rank, ranks, next]) h.close();
  assert.equal(s.liveRegistersSync(0), 0);
});

test('errors carry their kind', async (t) => {
  const s = threaded(t, 2);
  assert.throws(() => s.getGlobalFunc('js_test.missing'),
    (e) => e instanceof d.KeyError && e.kind === 'KeyError' && e.status === 4 && /js_test.missing/.test(e.message));
  const fails = s.getGlobalFunc(register(() => {
    if (d.currentWorkerId() === 1) throw new Error(`no luck on worker ${d.currentWorkerId()}`);
    return null;
  }));
  s.call(fails).close();
  await s.syncWorker(0);
  await assert.rejects(s.syncAll(), (e) => e instanceof d.WorkerError && /no luck on worker 1/.test(e.message));
  await s.syncAll();
  const kinds = s.getGlobalFunc(register(() => { throw new d.IndexError('out of range'); }));
  s.call(kinds).close();
  await assert.rejects(s.syncAll(), /IndexError: out of range/);
  const promise = s.getGlobalFunc(register(async () => 1));
  s.call(promise).close();
  await assert.rejects(s.syncAll(), /must return its result, not a Promise/);
  assert.throws(() => d.getGlobal(register(() => { throw new TypeError('wrong'); })).call(), d.TypeError);
});

test('the status says what every worker does', async (t) => {
  const s = threaded(t, 3);
  const rank = s.getGlobalFunc('runtime.disco.worker_rank'); // a lookup is no call
  const first = s.call(rank);
  const second = s.call(rank);
  s.syncAllSync();
  const status = s.status();
  assert.deepEqual(Object.keys(status).sort(), ['calls_sent', 'workers']);
  assert.equal(status.calls_sent, 2);
  assert.equal(status.workers.length, 3);
  status.workers.forEach((seen, w) => {
    assert.equal(seen.worker, w);
    assert.equal(seen.node, 0);
    assert.equal(seen.pid, process.pid);
    assert.equal(seen.state, 'idle');
    assert.equal(seen.call, 2);
    assert.equal(seen.last_finished_call, 2);
    assert.equal(seen.function, 'runtime.disco.worker_rank');
    assert.ok(seen.since_ms >= 0);
    assert.deepEqual(seen.waits_for, []);
    assert.equal(seen.last_failure, null);
    assert.equal(seen.cause, null);
    // The flight recorder's last events end with the second call.
    const last = seen.last_events[seen.last_events.length - 1];
    assert.deepEqual([last.cat, last.call, last.name], ['call', 2, 'runtime.disco.worker_rank']);
    assert.ok(last.dur_ms >= 0 && last.began_ms_ago >= last.dur_ms);
  });
  for (const h of [rank, first, second]) h.close();
  await s.shutdown();
  assert.throws(() => s.status(), d.SessionClosed);
});

test('a trace and a dump are written', async (t) => {
  const s = threaded(t, 2);
  const rank = s.getGlobalFunc('runtime.disco.worker_rank');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'discovm-trace-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  s.traceStart();
  assert.throws(() => s.traceStart(), d.ValueError);
  const got = s.call(rank);
  s.syncAllSync();
  s.traceStop(path.join(dir, 'trace.json'));
  s.traceDump(path.join(dir, 'dump.json'));
  for (const name of ['trace.json', 'dump.json']) {
    const trace = JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8'));
    const runs = trace.traceEvents.filter((e) => e.ph === 'X' && e.name === 'runtime.disco.worker_rank');
    assert.equal(runs.length, 2, name);
  }
  assert.throws(() => s.traceStop(path.join(dir, 'again.json')), d.ValueError);
  for (const h of [rank, got]) h.close();
});

test('worker handles and shutdown', async (t) => {
  const s = d.Session.threaded(3);
  const rank = s.getGlobalFunc('runtime.disco.worker_rank');
  const w = s.worker(2);
  assert.equal(w.id, 2);
  assert.deepEqual(w.device, { deviceType: 1, deviceId: 0 });
  const out = w.call(rank);
  await w.sync();
  assert.equal(out.getSync(2), 2);
  assert.throws(() => s.worker(3), d.IndexError);
  await s.shutdown();
  assert.throws(() => s.getGlobalFunc('runtime.disco.worker_rank'), d.SessionClosed);
  s.close();
  s.close();
  assert.throws(() => s.syncAllSync(), (e) => e instanceof d.ValueError && /closed/.test(e.message));
  assert.throws(() => d.Session.threaded(0), d.ValueError);
});

test('copies and collectives between threads', async (t) => {
  await checkCollectives(threaded(t, 4), 4);
});
