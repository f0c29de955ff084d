// JS values to and from DVMAny, tvm-ffi's 16-byte value (type index, small length, payload),
// kept in Buffers: objects cross as their addresses (koffi's pointers are BigInts).

import { C, koffi } from './ffi.js';
import { check, libraryError } from './errors.js';

export const ANY_SIZE = 16;

const TI = {
  None: 0, Int: 1, Bool: 2, Float: 3, OpaquePtr: 4, DataType: 5, Device: 6, RawStr: 8,
  SmallStr: 11, SmallBytes: 12, Object: 64, Str: 65, Bytes: 66, Function: 68, Shape: 69,
  Tensor: 70, Array: 71,
};
const OBJECT_HEADER = 24n;

/** A tensor shape (a Shape object when passed). */
export class Shape {
  constructor(dims) { this.dims = Array.from(dims, Number); }
}

/** A DLPack data type. */
export class DataType {
  constructor(code, bits, lanes = 1) { Object.assign(this, { code, bits, lanes }); }
}

/** A DLPack device. */
export class Device {
  constructor(deviceType, deviceId = 0) { Object.assign(this, { deviceType, deviceId }); }
}

/** Bytes of memory at an address, copied. */
export function readMemory(address, size) {
  return size === 0 ? Buffer.alloc(0) : Buffer.from(new Uint8Array(koffi.view(address, size)));
}

/** A Buffer over the memory at an address (writes reach it). */
export function memoryAt(address, size) {
  return Buffer.from(koffi.view(address, size));
}

/** Arguments of one call in C memory, releasing the values they made. */
export class Args {
  constructor(values) {
    this.count = values.length;
    this.buffer = Buffer.alloc(ANY_SIZE * Math.max(values.length, 1));
    this.owned = [];
    try {
      values.forEach((v, i) => this.#set(i, v));
    } catch (e) {
      this.release();
      throw e;
    }
  }

  #set(i, v) {
    const at = i * ANY_SIZE;
    const b = this.buffer;
    if (v === null || v === undefined) return;
    if (typeof v === 'boolean') {
      b.writeInt32LE(TI.Bool, at);
      b.writeBigInt64LE(v ? 1n : 0n, at + 8);
    } else if (typeof v === 'bigint') {
      b.writeInt32LE(TI.Int, at);
      b.writeBigInt64LE(BigInt.asIntN(64, v), at + 8);
    } else if (typeof v === 'number') {
      if (Number.isInteger(v)) {
        b.writeInt32LE(TI.Int, at);
        b.writeBigInt64LE(BigInt(v), at + 8);
      } else {
        b.writeInt32LE(TI.Float, at);
        b.writeDoubleLE(v, at + 8);
      }
    } else if (typeof v === 'string' || v instanceof Uint8Array || v instanceof Shape) {
      ownedValue(v, b.subarray(at, at + ANY_SIZE));
      this.owned.push(at);
    } else if (v instanceof DataType) {
      b.writeInt32LE(TI.DataType, at);
      b.writeUInt8(v.code, at + 8);
      b.writeUInt8(v.bits, at + 9);
      b.writeUInt16LE(v.lanes, at + 10);
    } else if (v instanceof Device) {
      b.writeInt32LE(TI.Device, at);
      b.writeInt32LE(v.deviceType, at + 8);
      b.writeInt32LE(v.deviceId, at + 12);
    } else if (v && typeof v.objectAddress === 'function') {
      writeObject(b, at, v.objectAddress(`argument ${i}`));
    } else {
      throw libraryError('TypeError', `argument ${i}: a JS ${describe(v)} cannot be passed (pass null, ` +
        'booleans, numbers, BigInts, strings, Uint8Arrays, Shape, DataType, Device, DRef, Tensor or Func)');
    }
  }

  /** Drops the values the arguments made. */
  release() {
    for (const at of this.owned) C.dvm_any_release(this.buffer.subarray(at, at + ANY_SIZE));
    this.owned = [];
  }
}

function describe(v) {
  return v === null ? 'null' : typeof v === 'object' ? (v.constructor?.name ?? 'object') : typeof v;
}

/** Writes a borrowed value naming the object at `address`. */
export function writeObject(b, at, address) {
  b.writeInt32LE(objectTypeIndex(address), at);
  b.writeBigUInt64LE(address, at + 8);
}

/** The type index in an object's header. */
export function objectTypeIndex(address) {
  return readMemory(address + 8n, 4).readInt32LE(0);
}

/** Makes the owned value of a string, byte string or shape into `out` (16 bytes). */
export function ownedValue(v, out) {
  if (typeof v === 'string') {
    const bytes = Buffer.from(v, 'utf8');
    check(C.dvm_string_new(bytes, bytes.length, out));
  } else if (v instanceof Uint8Array) {
    check(C.dvm_bytes_new(v, v.byteLength, out));
  } else {
    check(C.dvm_shape_new(BigInt64Array.from(v.dims, BigInt), v.dims.length, out));
  }
}

/** An integer as a number when it is one exactly, else a BigInt. */
function integer(n) {
  return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
}

/**
 * Converts an owned value (16 bytes at `b`) to JS, taking over its reference: numbers,
 * strings, byte strings, shapes and arrays are copied (the value released), objects become
 * handles made by `wrap(typeIndex, address)`.
 */
export function jsValue(b, wrap) {
  const ti = b.readInt32LE(0);
  switch (ti) {
    case TI.None: return null;
    case TI.Int: return integer(b.readBigInt64LE(8));
    case TI.Bool: return b.readBigInt64LE(8) !== 0n;
    case TI.Float: return b.readDoubleLE(8);
    case TI.OpaquePtr: return b.readBigUInt64LE(8);
    case TI.DataType: return new DataType(b.readUInt8(8), b.readUInt8(9), b.readUInt16LE(10));
    case TI.Device: return new Device(b.readInt32LE(8), b.readInt32LE(12));
    case TI.SmallStr: return b.toString('utf8', 8, 8 + b.readUInt32LE(4));
    case TI.SmallBytes: return Buffer.from(b.subarray(8, 8 + b.readUInt32LE(4)));
  }
  if (ti < TI.Object) throw libraryError('TypeError', `a value of type index ${ti} has no JS form`);
  const address = b.readBigUInt64LE(8);
  const cell = readMemory(address + OBJECT_HEADER, 16);
  let out;
  switch (ti) {
    case TI.Str:
    case TI.Bytes: {
      const bytes = readMemory(cell.readBigUInt64LE(0), Number(cell.readBigUInt64LE(8)));
      out = ti === TI.Str ? bytes.toString('utf8') : bytes;
      break;
    }
    case TI.Shape: {
      const n = Number(cell.readBigUInt64LE(8));
      const dims = readMemory(cell.readBigUInt64LE(0), 8 * n);
      out = new Shape(Array.from({ length: n }, (_, i) => integer(dims.readBigInt64LE(8 * i))));
      break;
    }
    case TI.Array: {
      const n = Number(cell.readBigInt64LE(8));
      const elements = readMemory(cell.readBigUInt64LE(0), ANY_SIZE * n);
      out = Array.from({ length: n }, (_, i) => borrowedJsValue(elements.subarray(i * ANY_SIZE, (i + 1) * ANY_SIZE), wrap));
      break;
    }
    default:
      return wrap(ti, address);
  }
  C.dvm_any_release(b);
  return out;
}

/** Converts a borrowed value, taking a reference of its own to an object. */
export function borrowedJsValue(b, wrap) {
  const copy = Buffer.from(b);
  const ti = copy.readInt32LE(0);
  if (ti === TI.RawStr) return koffi.decode(copy.readBigUInt64LE(8), 'char', -1);
  if (ti >= TI.Object) C.dvm_object_inc_ref(copy.readBigUInt64LE(8));
  return jsValue(copy, wrap);
}

export { TI };
