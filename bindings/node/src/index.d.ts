// Type declarations of the discovm package.

export type Value = null | boolean | number | bigint | string | Uint8Array | Shape | DataType |
  Device | Handle | Value[];
export type HostArray = Int8Array | Int16Array | Int32Array | BigInt64Array | Uint8Array |
  Uint16Array | Uint32Array | BigUint64Array | Float32Array | Float64Array;

export class Shape { constructor(dims: Iterable<number>); dims: number[]; }
export class DataType { constructor(code: number, bits: number, lanes?: number); code: number; bits: number; lanes: number; }
export class Device { constructor(deviceType: number, deviceId?: number); deviceType: number; deviceId: number; }

export const dtypes: Record<'int8' | 'int16' | 'int32' | 'int64' | 'uint8' | 'uint16' | 'uint32' |
  'uint64' | 'float32' | 'float64', DataType>;
export const cpu: Device;

export class Handle {
  readonly closed: boolean;
  close(): void;
  [Symbol.dispose](): void;
}
export class DVMObject extends Handle {}

export interface SessionOptions {
  numGroups?: number;
  timeoutMs?: number;
  spinUs?: number;
  cpuAffinity?: number[];
  devices?: Device[];
  workerProgram?: string;
  sessionToken?: string;
  heartbeatMs?: number;
  uploadModules?: boolean;
  localThreads?: boolean;
  /** OpenMP and BLAS threads of each worker process: 0 the cores shared, -1 the environment's, n. */
  threadsPerWorker?: number;
}

/** What one worker is doing (Session.status); a field the worker has not reported is null. */
export interface WorkerStatus {
  worker: number;
  /** The machine it runs on (0: this one). */
  node: number;
  /** Its process: this process for worker threads. */
  pid: number | null;
  state: 'idle' | 'running' | 'collective' | 'syncing' | 'dead' | 'lost' | 'unknown';
  /** The number of the call it runs, or ran last (calls are numbered from 1 as sent). */
  call: number | null;
  function: string | null;
  /** How long it has been in its state, in milliseconds. */
  since_ms: number | null;
  /** The collective it waits in (state 'collective'). */
  collective: string | null;
  /** The workers it waits for in that collective. */
  waits_for: number[];
  last_finished_call: number | null;
  last_failure: { call: number; error: string } | null;
  /** Why a dead or lost worker is so. */
  cause: string | null;
  /** Its last events, oldest first (null for a worker on another machine: traceDump asks its
   * node for them). */
  last_events: WorkerEvent[] | null;
}
export interface WorkerEvent {
  /** The function's, the collective's, the stream instruction's or the module's. */
  name: string;
  cat: 'call' | 'sync' | 'collective' | 'module' | 'stream';
  /** The call it belongs to (0: none). */
  call: number;
  /** How long ago it began, in milliseconds. */
  began_ms_ago: number;
  dur_ms: number;
}
export interface SessionStatus {
  workers: WorkerStatus[];
  /** How many calls the session has sent: the number of the last one. */
  calls_sent: number;
}

export class Session extends Handle {
  static threaded(numWorkers: number, options?: SessionOptions): Session;
  static process(numWorkers: number, options?: SessionOptions): Session;
  static socket(numNodes: number, workersPerNode: number, host: string, port: number, options?: SessionOptions): Session;
  readonly numWorkers: number;
  getGlobalFunc(name: string): DRef;
  loadModule(path: string): DRef;
  moduleFunc(module: DRef, name: string): DRef;
  call(fn: DRef, ...args: Value[]): DRef;
  syncWorker(worker: number): Promise<void>;
  syncWorkerSync(worker: number): void;
  syncAll(): Promise<void>;
  syncAllSync(): void;
  liveRegistersSync(worker: number): number;
  status(): SessionStatus;
  copyToWorker0(host: HostArray, shape: number[], dst: DRef): Promise<void>;
  copyToWorker0Sync(host: HostArray, shape: number[], dst: DRef): void;
  copyFromWorker0(host: HostArray, shape: number[], src: DRef): Promise<void>;
  copyFromWorker0Sync(host: HostArray, shape: number[], src: DRef): void;
  initCCL(backend: 'cpu' | 'nccl', deviceIds?: number[]): Promise<void>;
  empty(shape: number[], dtype: DataType, options?: { worker0Only?: boolean }): DRef;
  allreduce(src: DRef, dst: DRef, options?: { op?: 'sum' | 'prod' | 'min' | 'max' | 'avg'; inGroup?: boolean }): void;
  allgather(src: DRef, dst: DRef, options?: { inGroup?: boolean }): void;
  broadcastFromWorker0(src: DRef, dst: DRef, options?: { inGroup?: boolean }): void;
  scatterFromWorker0(src: DRef, dst: DRef, options?: { inGroup?: boolean }): void;
  gatherToWorker0(src: DRef, dst: DRef, options?: { inGroup?: boolean }): void;
  barrier(): void;
  worker(id: number): Worker;
  shutdown(): Promise<void>;
}

export class DRef extends Handle {
  get(worker: number): Promise<Value>;
  getSync(worker: number): Value;
  set(worker: number, value: Value): void;
}

export class Worker extends Handle {
  readonly id: number;
  readonly device: { deviceType: number; deviceId: number };
  call(fn: DRef, ...args: Value[]): DRef;
  sync(): Promise<void>;
  syncSync(): void;
}

export class Func extends Handle {
  static from(fn: (...args: Value[]) => Value): Func;
  register(name: string, options?: { override?: boolean }): void;
  call(...args: Value[]): Value;
}
export function registerGlobal(name: string, fn: (...args: Value[]) => Value, options?: { override?: boolean }): void;
export function getGlobal(name: string): Func;
export function removeGlobal(name: string): void;
export function globalNames(): string[];
export function currentWorkerId(): number;

export class Tensor extends Handle {
  static empty(shape: number[], dtype: DataType, device?: Device): Tensor;
  static from(array: HostArray, shape?: number[]): Tensor;
  readonly shape: number[];
  readonly dtype: DataType;
  readonly device: Device;
  read<T extends HostArray>(array: T): T;
  write(array: HostArray): void;
  toTypedArray(): HostArray;
}
export class Stream extends Handle {
  constructor(device?: Device);
  copy(dst: Tensor, src: Tensor): void;
  wait(signaler: Stream): void;
  sync(): void;
}
export function deviceCount(deviceType: number): number;
export function version(): string;

export class DiscovmError extends Error {
  constructor(kind: string, message: string, status?: number);
  readonly kind: string;
  readonly status: number;
}
declare class KindError extends DiscovmError { constructor(message: string, status?: number); }
export class ValueError extends KindError {}
export class TypeError extends KindError {}
export class IndexError extends KindError {}
export class KeyError extends KindError {}
export class RuntimeError extends KindError {}
export class WorkerError extends KindError {}
export class SessionClosed extends KindError {}
export class DeviceUnavailable extends KindError {}
export class TimeoutError extends KindError {}
export class Panic extends KindError {}
