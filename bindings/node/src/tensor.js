// Tensors and streams of the library's VM, with TypedArrays for their contents.

import { C } from './ffi.js';
import { check, libraryError } from './errors.js';
import { Handle, HANDLE_CLASSES } from './handles.js';
import { DataType, Device, readMemory, TI } from './values.js';

/** The data types of the TypedArrays, and back. */
export const dtypes = {
  int8: new DataType(0, 8), int16: new DataType(0, 16), int32: new DataType(0, 32), int64: new DataType(0, 64),
  uint8: new DataType(1, 8), uint16: new DataType(1, 16), uint32: new DataType(1, 32), uint64: new DataType(1, 64),
  float32: new DataType(2, 32), float64: new DataType(2, 64),
};
const ARRAYS = {
  int8: Int8Array, int16: Int16Array, int32: Int32Array, int64: BigInt64Array,
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array,
  float32: Float32Array, float64: Float64Array,
};

/** The name of a data type (`float32`, ...), or undefined. */
function dtypeName(t) {
  return Object.keys(dtypes).find((k) => dtypes[k].code === t.code && dtypes[k].bits === t.bits && t.lanes === 1);
}

/** The data type of a TypedArray; another value is a TypeError. */
export function dtypeOf(array) {
  const name = Object.keys(ARRAYS).find((k) => array instanceof ARRAYS[k]);
  if (!ArrayBuffer.isView(array) || name === undefined) {
    throw libraryError('TypeError', `host memory must be a TypedArray, not ${array?.constructor?.name ?? typeof array}`);
  }
  return dtypes[name];
}

export const cpu = new Device(1, 0);

/** A tensor: it remembers the stream that last used it, so reads, writes and copies on other
 * streams wait for that use. */
export class Tensor extends Handle {
  /** An uninitialised (on the CPU: zero-filled) tensor. */
  static empty(shape, dtype, device = cpu) {
    const out = [null];
    check(C.dvm_tensor_empty(BigInt64Array.from(shape, BigInt), shape.length,
      { code: dtype.code, bits: dtype.bits, lanes: dtype.lanes },
      { device_type: device.deviceType, device_id: device.deviceId }, out));
    return new Tensor(out[0]);
  }

  /** A CPU tensor holding a copy of `array`, of `shape` (default: its length). */
  static from(array, shape = [array.length]) {
    const t = Tensor.empty(shape, dtypeOf(array));
    t.write(array);
    return t;
  }

  /** The DLTensor's fields. */
  #dl() {
    const dl = readMemory(C.dvm_tensor_dl(this.objectAddress()), 48);
    const ndim = dl.readInt32LE(16);
    const dims = readMemory(dl.readBigUInt64LE(24), 8 * ndim);
    return {
      device: new Device(dl.readInt32LE(8), dl.readInt32LE(12)),
      shape: Array.from({ length: ndim }, (_, i) => Number(dims.readBigInt64LE(8 * i))),
      dtype: new DataType(dl.readUInt8(20), dl.readUInt8(21), dl.readUInt16LE(22)),
    };
  }

  get shape() { return this.#dl().shape; }
  get dtype() { return this.#dl().dtype; }
  get device() { return this.#dl().device; }

  /** Reads the first bytes into `array` (a TypedArray), after every earlier use. */
  read(array) {
    dtypeOf(array);
    check(C.dvm_tensor_read(this.objectAddress(), array, array.byteLength));
    return array;
  }

  /** Writes `array` (a TypedArray) into the first bytes, after every earlier use. */
  write(array) {
    dtypeOf(array);
    check(C.dvm_tensor_write(this.objectAddress(), array, array.byteLength));
  }

  /** The whole tensor, copied into a TypedArray of its data type. */
  toTypedArray() {
    const { shape, dtype } = this.#dl();
    const name = dtypeName(dtype);
    if (name === undefined) throw libraryError('TypeError', `no TypedArray holds ${JSON.stringify(dtype)}`);
    return this.read(new ARRAYS[name](shape.reduce((a, b) => a * b, 1)));
  }
}
HANDLE_CLASSES[TI.Tensor] = Tensor;

/** A stream: copies on it run in order on one device. */
export class Stream extends Handle {
  constructor(device = cpu) {
    const out = [null];
    check(C.dvm_stream_new({ device_type: device.deviceType, device_id: device.deviceId }, out));
    super(out[0]);
  }

  /** Queues a copy of `src` into `dst` and returns at once. */
  copy(dst, src) {
    check(C.dvm_tensor_copy(dst.objectAddress('dst'), src.objectAddress('src'), this.objectAddress()));
  }

  /** Makes work submitted from now on wait for everything submitted to `signaler`. */
  wait(signaler) {
    check(C.dvm_stream_wait(this.objectAddress(), signaler.objectAddress('signaler')));
  }

  /** Waits until everything submitted has run, and reports its first failure. */
  sync() {
    check(C.dvm_stream_sync(this.objectAddress()));
  }
}

/** How many devices of a type (1 CPU, 2 CUDA, 3 CUDA host memory) the library can use. */
export function deviceCount(deviceType) {
  const out = new Int32Array(1);
  check(C.dvm_device_count(deviceType, out));
  return out[0];
}

/** The library's version. */
export function version() {
  return C.dvm_version();
}
