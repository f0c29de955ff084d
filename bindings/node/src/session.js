// Sessions of workers (threads, processes, processes on other machines), their DRefs and
// worker handles. Calls return at once; the waits come twice: `syncAll()` and the other
// async methods wait on the waiter thread, leaving the JS thread free to run the JS
// functions workers call meanwhile, and `syncAllSync()` and the other *Sync methods block
// the JS thread (faster, for sessions that call no JS function).

import { C, koffi } from './ffi.js';
import { check, libraryError } from './errors.js';
import { Handle, wrap } from './handles.js';
import { Args, ANY_SIZE, jsValue, memoryAt, readMemory, Shape } from './values.js';
import { dtypeOf } from './tensor.js';
import { waitCall } from './wait.js';

const REDUCE_OPS = { sum: 0, prod: 1, min: 2, max: 3, avg: 4 };

/** dvm_session_options from JS options, in C memory for as long as `keep` lives. */
function cOptions(o = {}) {
  const keep = [];
  const array = (type, values) => {
    if (!values || values.length === 0) return null;
    const p = koffi.alloc(type, values.length);
    koffi.encode(p, type, values, values.length);
    keep.push(p);
    return p;
  };
  const options = {
    timeout_ms: o.timeoutMs ?? 0,
    spin_us: o.spinUs ?? 0,
    num_cpu_affinity: o.cpuAffinity?.length ?? 0,
    cpu_affinity: array('int32_t', o.cpuAffinity),
    num_devices: o.devices?.length ?? 0,
    devices: array('DLDevice', o.devices?.map((d) => ({ device_type: d.deviceType, device_id: d.deviceId }))),
    worker_program: o.workerProgram ?? null,
    session_token: o.sessionToken ?? null,
    heartbeat_ms: o.heartbeatMs ?? 0,
    upload_modules: o.uploadModules ? 1 : 0,
    local_threads: o.localThreads ? 1 : 0,
    threads_per_worker: o.threadsPerWorker ?? 0,
  };
  return { options, free: () => keep.forEach((p) => koffi.free(p)) };
}

function newSession(start, options) {
  const { options: c, free } = cOptions(options);
  try {
    const out = [null];
    check(start(c, out));
    return new Session(out[0]);
  } finally {
    free();
  }
}

/** A pool of workers driven from here. */
export class Session extends Handle {
  #builtins = new Map();

  /** `numWorkers` worker threads in `numGroups` groups; JS functions run on them. */
  static threaded(numWorkers, { numGroups = 1, ...options } = {}) {
    return newSession((o, out) => C.dvm_session_new_threaded(numWorkers, numGroups, o, out), options);
  }

  /** `numWorkers` worker processes (options.workerProgram, else discovm-worker). */
  static process(numWorkers, { numGroups = 1, ...options } = {}) {
    return newSession((o, out) => C.dvm_session_new_process(numWorkers, numGroups, o, out), options);
  }

  /** A session across `numNodes` machines: this one listens on host:port until every other
   * node (`discovm-node HOST PORT WORKERS`) joined. Blocks the JS thread while it waits. */
  static socket(numNodes, workersPerNode, host, port, { numGroups = 1, ...options } = {}) {
    return newSession((o, out) =>
      C.dvm_session_new_socket(numNodes, workersPerNode, numGroups, host, port, o, out), options);
  }

  get numWorkers() { return this.closed ? 0 : C.dvm_session_num_workers(this.objectAddress()); }

  #dref(call) {
    const out = [null];
    check(call(this.objectAddress(), out));
    return new DRef(out[0]);
  }

  /** A DRef to the global function `name` on every worker (a KeyError if none has it). */
  getGlobalFunc(name) {
    return this.#dref((s, out) => C.dvm_session_get_global_func(s, name, out));
  }

  /** Loads the shared library at `path` on every worker; moduleFunc reaches its functions. */
  loadModule(path) {
    return this.#dref((s, out) => C.dvm_session_load_module(s, path, out));
  }

  /** A DRef to the function `name` of the module every worker holds in `module`. */
  moduleFunc(module, name) {
    return this.#dref((s, out) => C.dvm_session_module_func(s, module.objectAddress('module'), name, out));
  }

  /** Calls `fn` on every worker with `args` and returns at once with a DRef to the results. */
  call(fn, ...args) {
    const a = new Args(args);
    try {
      return this.#dref((s, out) => C.dvm_session_call(s, fn.objectAddress('fn'), a.buffer, a.count, out));
    } finally {
      a.release();
    }
  }

  /** Waits, off the JS thread, until every call sent to `worker` has finished. */
  syncWorker(worker) { return waitCall('dvm_session_sync_worker', this.objectAddress(), worker); }
  syncWorkerSync(worker) { check(C.dvm_session_sync_worker(this.objectAddress(), worker)); }

  /** Waits, off the JS thread, until every call sent to every worker has finished. */
  syncAll() { return waitCall('dvm_session_sync_all', this.objectAddress()); }
  syncAllSync() { check(C.dvm_session_sync_all(this.objectAddress())); }

  /** How many registers hold a value on `worker` (0 once every DRef is closed). */
  liveRegistersSync(worker) {
    const out = new BigInt64Array(1);
    check(C.dvm_session_live_registers(this.objectAddress(), worker, out));
    return Number(out[0]);
  }

  /** What every worker is doing now, read without asking any worker (a worker stuck in a
   * function, or dead, is reported as it is): `{workers: [{worker, node, pid, state, call,
   * function, since_ms, collective, waits_for, last_finished_call, last_failure, cause,
   * last_events}], calls_sent}`. It never waits, so it has no async form. */
  status() {
    const out = Buffer.alloc(ANY_SIZE);
    check(C.dvm_session_status(this.objectAddress(), out));
    return JSON.parse(jsValue(out, wrap));
  }

  /** Begins a trace: every worker's calls, syncs, collectives and module loads, and the
   * controller's sends, syncs and copies, are kept until `traceStop`. */
  traceStart() { check(C.dvm_session_trace_start(this.objectAddress())); }

  /** Ends the trace and writes it to the file `path` in the Chrome Trace Event Format, which
   * ui.perfetto.dev and chrome://tracing open. */
  traceStop(path) { check(C.dvm_session_trace_stop(this.objectAddress(), path)); }

  /** Writes the flight recorder (every worker's last 1024 events, kept at all times) to the file
   * `path`, in the format of a trace, with no trace running. */
  traceDump(path) { check(C.dvm_session_trace_dump(this.objectAddress(), path)); }

  /** Copies `host` (a TypedArray holding a tensor of `shape`) into worker 0's `dst`. */
  copyToWorker0(host, shape, dst) { return this.#copy(host, shape, dst, true, true); }
  copyToWorker0Sync(host, shape, dst) { return this.#copy(host, shape, dst, true, false); }

  /** Copies worker 0's `src` into `host` (a TypedArray of `shape`'s size). */
  copyFromWorker0(host, shape, src) { return this.#copy(host, shape, src, false, true); }
  copyFromWorker0Sync(host, shape, src) { return this.#copy(host, shape, src, false, false); }

  #copy(host, shape, remote, to, async) {
    const dtype = dtypeOf(host);
    const elements = shape.reduce((a, b) => a * b, 1);
    if (elements !== host.length) {
      throw libraryError('ValueError', `the host array has ${host.length} elements, the shape [${shape}] has ${elements}`);
    }
    // A DLTensor and the memory it names, in C memory that stays put while the call runs.
    const bytes = Math.max(host.byteLength, 1);
    const data = koffi.alloc('uint8_t', bytes);
    const dims = koffi.alloc('int64_t', Math.max(shape.length, 1));
    const dl = koffi.alloc('uint8_t', 48);
    const view = new Uint8Array(host.buffer, host.byteOffset, host.byteLength);
    const finish = () => {
      if (!to) view.set(readMemory(data, host.byteLength));
      [data, dims, dl].forEach((p) => koffi.free(p));
    };
    try {
      if (to) memoryAt(data, bytes).set(view);
      memoryAt(dims, 8 * shape.length).set(new Uint8Array(BigInt64Array.from(shape, BigInt).buffer));
      const t = memoryAt(dl, 48);
      t.fill(0);
      t.writeBigUInt64LE(data, 0);
      t.writeInt32LE(1, 8); // kDLCPU
      t.writeInt32LE(shape.length, 16);
      t.writeUInt8(dtype.code, 20);
      t.writeUInt8(dtype.bits, 21);
      t.writeUInt16LE(dtype.lanes, 22);
      t.writeBigUInt64LE(dims, 24);
    } catch (e) {
      finish();
      throw e;
    }
    const name = to ? 'dvm_session_copy_to_worker0' : 'dvm_session_copy_from_worker0';
    const args = [this.objectAddress(), dl, remote.objectAddress('remote')];
    if (async) return waitCall(name, ...args).finally(finish);
    try {
      check(C[name](...args));
    } finally {
      finish();
    }
  }

  /** Sets up collectives between the workers: "cpu" or "nccl" (off the JS thread). */
  initCCL(backend, deviceIds = []) {
    const ids = koffi.alloc('int32_t', Math.max(deviceIds.length, 1));
    if (deviceIds.length) koffi.encode(ids, 'int32_t', deviceIds, deviceIds.length);
    const name = koffi.alloc('char', backend.length + 1);
    koffi.encode(name, 'char', backend, backend.length + 1);
    return waitCall('dvm_session_init_ccl', this.objectAddress(), name, ids, deviceIds.length)
      .finally(() => { koffi.free(ids); koffi.free(name); });
  }

  /** An uninitialised tensor on every worker, or on worker 0 of each group alone. */
  empty(shape, dtype, { worker0Only = false } = {}) {
    return this.call(this.#builtin('runtime.disco.empty'), new Shape(shape), dtype, null, worker0Only, true);
  }

  /** Reduces `src` across the workers into every worker's `dst` (returns at once). */
  allreduce(src, dst, { op = 'sum', inGroup = false } = {}) {
    if (!(op in REDUCE_OPS)) throw libraryError('ValueError', `unknown reduction ${op} (${Object.keys(REDUCE_OPS)})`);
    this.#collective('allreduce', src, new Shape([REDUCE_OPS[op]]), inGroup, dst);
  }

  allgather(src, dst, { inGroup = false } = {}) { this.#collective('allgather', src, inGroup, dst); }
  broadcastFromWorker0(src, dst, { inGroup = false } = {}) { this.#collective('broadcast_from_worker0', src, inGroup, dst); }
  scatterFromWorker0(src, dst, { inGroup = false } = {}) { this.#collective('scatter_from_worker0', src, inGroup, dst); }
  gatherToWorker0(src, dst, { inGroup = false } = {}) { this.#collective('gather_to_worker0', src, inGroup, dst); }
  barrier() { this.#collective('barrier'); }

  #collective(name, ...args) {
    this.call(this.#builtin(`runtime.disco.${name}`), ...args).close();
  }

  #builtin(name) {
    if (!this.#builtins.has(name)) this.#builtins.set(name, this.getGlobalFunc(name));
    return this.#builtins.get(name);
  }

  /** A handle to worker `id`, for calls to it alone. */
  worker(id) {
    const out = [null];
    check(C.dvm_session_worker(this.objectAddress(), id, out));
    return new Worker(out[0]);
  }

  /** Stops the workers once the work sent has run (off the JS thread); later calls fail
   * with SessionClosed. */
  async shutdown() {
    this.#dropBuiltins();
    await waitCall('dvm_session_shutdown', this.objectAddress());
  }

  #dropBuiltins() {
    for (const d of this.#builtins.values()) d.close();
    this.#builtins.clear();
  }

  /** Shuts the session down (blocking the JS thread) and drops it. */
  close() {
    if (this.closed) return;
    this.#dropBuiltins();
    try {
      check(C.dvm_session_shutdown(this.objectAddress()));
    } finally {
      super.close();
    }
  }
}

/** A remote reference: the same register on every worker. */
export class DRef extends Handle {
  /** The value on `worker`, after every call sent before (waits off the JS thread). */
  async get(worker) {
    const out = koffi.alloc('uint8_t', ANY_SIZE);
    try {
      await waitCall('dvm_dref_get', this.objectAddress(), worker, out);
      return jsValue(Buffer.from(readMemory(out, ANY_SIZE)), wrap);
    } finally {
      koffi.free(out);
    }
  }

  /** The value on `worker`, blocking the JS thread while it waits. */
  getSync(worker) {
    const out = Buffer.alloc(ANY_SIZE);
    check(C.dvm_dref_get(this.objectAddress(), worker, out));
    return jsValue(out, wrap);
  }

  /** Sets the value on `worker`, after every call sent before; returns at once. */
  set(worker, value) {
    const a = new Args([value]);
    try {
      check(C.dvm_dref_set(this.objectAddress(), worker, a.buffer));
    } finally {
      a.release();
    }
  }
}

/** One worker of a session, for calls to it alone. */
export class Worker extends Handle {
  get id() { return C.dvm_worker_id(this.objectAddress()); }

  get device() {
    const out = Buffer.alloc(8);
    check(C.dvm_worker_device(this.objectAddress(), out));
    return { deviceType: out.readInt32LE(0), deviceId: out.readInt32LE(4) };
  }

  call(fn, ...args) {
    const a = new Args(args);
    try {
      const out = [null];
      check(C.dvm_worker_call(this.objectAddress(), fn.objectAddress('fn'), a.buffer, a.count, out));
      return new DRef(out[0]);
    } finally {
      a.release();
    }
  }

  sync() { return waitCall('dvm_worker_sync', this.objectAddress()); }
  syncSync() { check(C.dvm_worker_sync(this.objectAddress())); }
}
