// The Node.js side of the bindings benchmark: the loops of benches/bindings/calls.c through
// the Node package (pipelined calls of runtime.disco.worker_rank, each result closed at once,
// then one sync; and call + sync round trips, with the blocking syncAllSync and with the
// async syncAll), printing the same line, plus the async round trip.
//
// Usage: node calls.mjs [PIPELINED_CALLS [ROUND_TRIPS]]

import * as discovm from '../../bindings/node/src/index.js';

const ROUNDS = 5;
const pipelined = Number(process.argv[2] ?? 200000);
const roundTrips = Number(process.argv[3] ?? 20000);

const session = discovm.Session.threaded(1);
const fn = session.getGlobalFunc('runtime.disco.worker_rank');
let bestPipelined = Infinity;
let bestRoundTrip = Infinity;
let bestAsync = Infinity;
const now = () => Number(process.hrtime.bigint());
for (let round = 0; round < ROUNDS; round++) {
  const start = now();
  for (let i = 0; i < pipelined; i++) session.call(fn).close();
  session.syncAllSync();
  const mid = now();
  for (let i = 0; i < roundTrips; i++) {
    session.call(fn).close();
    session.syncAllSync();
  }
  const end = now();
  const asyncTrips = Math.max(1, roundTrips / 10);
  for (let i = 0; i < asyncTrips; i++) {
    session.call(fn).close();
    await session.syncAll();
  }
  bestPipelined = Math.min(bestPipelined, (mid - start) / pipelined);
  bestRoundTrip = Math.min(bestRoundTrip, (end - mid) / roundTrips);
  bestAsync = Math.min(bestAsync, (now() - end) / asyncTrips);
}
console.log(`pipelined_ns=${bestPipelined.toFixed(1)} round_trip_ns=${bestRoundTrip.toFixed(1)} async_round_trip_ns=${bestAsync.toFixed(1)}`);
fn.close();
session.close();
