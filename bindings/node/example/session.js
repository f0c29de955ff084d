// A session of four worker threads driven from Node.js: a JS function runs for every worker
// (on this thread, while the worker waits), results come back as JS values, a failure as an
// Error of its kind, and a tensor crosses to worker 0 and back after an allreduce.
//
//   cd bindings/node && npm install && node example/session.js

import * as discovm from '../src/index.js';

// Step 1: a JS function, registered under a name the workers find.
discovm.registerGlobal('example.scale', (x) => {
  if (typeof x !== 'number') throw new discovm.TypeError(`example.scale wants a number, got ${typeof x}`);
  return x * (discovm.currentWorkerId() + 1);
});

// Step 2: four worker threads; close() shuts them down.
const session = discovm.Session.threaded(4);
try {
  // Step 3: one call reaches every worker; each keeps its result. The async waits leave
  // this thread free to run example.scale for the workers.
  const scale = session.getGlobalFunc('example.scale');
  const result = session.call(scale, 10);
  for (let w = 0; w < session.numWorkers; w++) {
    console.log(`example.scale(10) on worker ${w} = ${await result.get(w)}`);
  }

  // Step 4: a failure on the workers rejects the next wait, with its kind.
  session.call(scale, 'ten').close();
  try {
    await session.syncAll();
  } catch (e) {
    if (!(e instanceof discovm.WorkerError)) throw e;
    console.log('as expected:', e.message.split(';')[0]);
  }

  // Step 5: collectives between the workers, and copies to and from worker 0.
  await session.initCCL('cpu');
  const x = session.empty([2, 3], discovm.dtypes.float32);
  await session.copyToWorker0(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3], x);
  session.broadcastFromWorker0(x, x);
  session.allreduce(x, x, { op: 'sum' });
  const out = new Float32Array(6);
  await session.copyFromWorker0(out, [2, 3], x);
  console.log('broadcast, then summed over 4 workers:', Array.from(out));
} finally {
  session.close();
}
