// JS functions as packed functions. A worker calls one through a hosted function
// (dvm_func_new_hosted): koffi queues the call to the JS thread and the worker waits; the
// worker's id comes in as an argument and an error goes back in the result, which the
// library raises on the worker's thread.

import { C, koffi } from './ffi.js';
import { check, DiscovmError, libraryError } from './errors.js';
import { Handle, HANDLE_CLASSES, wrap } from './handles.js';
import { Args, ANY_SIZE, borrowedJsValue, jsValue, memoryAt, ownedValue, Shape, TI, writeObject } from './values.js';

/** The JS functions made into packed functions, by the id their C function holds. */
const functions = new Map();
let nextId = 1n;
let current = null;

/** A packed function: one of the library's, a JS function (Func.from), or a result. */
export class Func extends Handle {
  /** A packed function running `fn(...args)`; it stays alive for the rest of the process,
   * since workers may hold it. */
  static from(fn) {
    if (typeof fn !== 'function') throw libraryError('ValueError', `Func.from wants a function, not ${typeof fn}`);
    const id = nextId++;
    functions.set(id, fn);
    const out = [null];
    check(C.dvm_func_new_hosted(id, hostedCall, null, out));
    return new Func(out[0]);
  }

  /** Registers the function under `name`; `override` replaces one registered before. */
  register(name, { override = false } = {}) {
    check(C.dvm_func_register_global(name, this.objectAddress(), override ? 1 : 0));
  }

  /** Calls the function here, on the JS thread. */
  call(...args) {
    const a = new Args(args);
    try {
      const result = Buffer.alloc(ANY_SIZE);
      check(C.dvm_func_call(this.objectAddress(), a.buffer, a.count, result));
      return jsValue(result, wrap);
    } finally {
      a.release();
    }
  }
}
HANDLE_CLASSES[TI.Function] = Func;

/** Registers `fn` under `name`, where threaded sessions' workers find it. */
export function registerGlobal(name, fn, options) {
  const f = Func.from(fn);
  try {
    f.register(name, options);
  } finally {
    f.close();
  }
}

/** The global function `name` (a KeyError when none is registered). */
export function getGlobal(name) {
  const out = [null];
  check(C.dvm_func_get_global(name, out));
  return new Func(out[0]);
}

/** Removes the global function `name`. */
export function removeGlobal(name) {
  check(C.dvm_func_remove_global(name));
}

/** The names of the global functions, sorted. */
export function globalNames() {
  const out = Buffer.alloc(ANY_SIZE);
  check(C.dvm_func_list_global_names(out));
  return jsValue(out, wrap);
}

/** The worker that called the JS function now running (-1 outside one: on the JS thread,
 * no worker runs). */
export function currentWorkerId() {
  return current ?? C.dvm_current_worker_id();
}

const hostedCall = koffi.register((self, args, numArgs, workerId, result) => {
  const out = memoryAt(result, ANY_SIZE);
  const outer = current;
  current = workerId;
  try {
    const fn = functions.get(self);
    const values = numArgs === 0 ? [] : Array.from({ length: numArgs }, (_, i) =>
      borrowedJsValue(memoryAt(args + BigInt(i * ANY_SIZE), ANY_SIZE), wrap));
    writeResult(fn(...values), out);
    return 0;
  } catch (e) {
    const kind = e instanceof DiscovmError ? e.kind : e?.name === 'TypeError' ? 'TypeError' : 'RuntimeError';
    ownedValue(`${kind}\0${e?.message ?? String(e)}`, out);
    return 1;
  } finally {
    current = outer;
  }
}, 'DVMHostedCall *');

/** Writes the owned value of a JS function's result. */
function writeResult(v, out) {
  if (v instanceof Promise) throw libraryError('TypeError', 'a JS function called by a worker must return its result, not a Promise');
  if (v instanceof Handle) {
    const address = v.objectAddress('the result');
    C.dvm_object_inc_ref(address);
    writeObject(out, 0, address);
  } else if (typeof v === 'string' || v instanceof Uint8Array || v instanceof Shape) {
    ownedValue(v, out);
  } else {
    new Args([v]).buffer.copy(out, 0, 0, ANY_SIZE);
  }
}
