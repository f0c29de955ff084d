// Blocking C calls made off the JS thread: each goes to the waiter thread (waiter.js), and
// its promise settles with the call's status, or its error.

import { Worker } from 'node:worker_threads';
import { libraryError } from './errors.js';
import { STATUS_KINDS } from './ffi.js';

let waiter = null;
let nextId = 0;
const pending = new Map();

function start() {
  waiter = new Worker(new URL('./waiter.js', import.meta.url));
  waiter.on('message', ({ id, status, kind, message }) => {
    const { resolve, reject } = pending.get(id);
    pending.delete(id);
    if (pending.size === 0) waiter.unref();
    if (status === 0) resolve();
    else reject(libraryError(kind ?? STATUS_KINDS[status] ?? 'RuntimeError', message ?? '', status));
  });
  waiter.on('error', (e) => {
    for (const { reject } of pending.values()) reject(e);
    pending.clear();
    waiter = null;
  });
}

/** Calls the C function `name` with `args` (numbers and addresses) on the waiter thread. */
export function waitCall(name, ...args) {
  if (waiter === null) start();
  waiter.ref();
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    waiter.postMessage({ id, name, args });
  });
}
