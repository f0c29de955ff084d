// The thread that makes the library's blocking calls for the async methods, so the JS thread
// stays free to run the JS functions the workers call meanwhile. It reads a failed call's
// error on its own thread, where the library left it.

import { parentPort } from 'node:worker_threads';
import { C } from './ffi.js';

parentPort.on('message', ({ id, name, args }) => {
  const status = C[name](...args);
  const reply = { id, status };
  if (status !== 0) {
    reply.kind = C.dvm_last_error_kind();
    reply.message = C.dvm_last_error_message();
  }
  parentPort.postMessage(reply);
});
