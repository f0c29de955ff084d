import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import * as d from '../src/index.js';
import { checkCollectives } from './collectives.js';

const library = process.env.DISCOVM_LIBRARY;
const skip = library ? false : 'DISCOVM_LIBRARY (libdiscovm.so, with discovm-worker and discovm-node next to it) is not set';

/** Built-ins and a module's function on a session of worker processes. */
async function checkWorkers(s, n) {
  assert.equal(s.numWorkers, n);
  const rank = s.getGlobalFunc('runtime.disco.worker_rank');
  const ranks = s.call(rank);
  for (let w = 0; w < n; w++) assert.equal(await ranks.get(w), w);
  const module = s.loadModule(library);
  const version = s.moduleFunc(module, 'version');
  const out = s.call(version);
  await s.syncAll();
  assert.equal(await out.get(n - 1), d.version());
  // A function the module lacks fails the lookup itself.
  assert.throws(() => s.moduleFunc(module, 'no_such_function'), (e) => e instanceof d.KeyError && /no_such_function/.test(e.message));
  await s.syncAll();
  assert.throws(() => s.call(rank, d.Func.from(() => null)), d.TypeError);
  for (const h of [rank, ranks, module, version, out]) h.close();
}

test('process sessions', { skip }, async () => {
  const s = d.Session.process(2, { timeoutMs: 60000 });
  try {
    await checkWorkers(s, 2);
    await checkCollectives(s, 2);
  } finally {
    s.close();
  }
  assert.throws(() => d.Session.process(1, { workerProgram: '/no/such/worker' }), /\/no\/such\/worker/);
});

function freePort() {
  return new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

test('socket sessions', { skip }, async () => {
  const port = await freePort();
  const token = 'a test secret';
  const node = spawn(join(dirname(library), 'discovm-node'), ['127.0.0.1', String(port), '1'], {
    env: { ...process.env, DISCOVM_SESSION_TOKEN: token }, stdio: 'inherit',
  });
  const exited = new Promise((resolve) => node.on('exit', resolve));
  let s;
  try {
    s = d.Session.socket(2, 1, '127.0.0.1', port, { timeoutMs: 60000, sessionToken: token, heartbeatMs: 5000 });
  } catch (e) {
    node.kill();
    throw e;
  }
  await checkWorkers(s, 2);
  await s.shutdown();
  s.close();
  assert.equal(await exited, 0);
});
