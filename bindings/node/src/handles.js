// Ownership: every handle owns one reference to a C object, dropped by close() (every handle
// is an object, and its dvm_*_free is dvm_object_dec_ref), or by a FinalizationRegistry when
// a handle its user forgot to close is collected.

import { C } from './ffi.js';
import { libraryError } from './errors.js';

const finalizer = new FinalizationRegistry((address) => C.dvm_object_dec_ref(address));

/** One reference to a library object. */
export class Handle {
  #address;

  constructor(address) {
    this.#address = address;
    finalizer.register(this, address, this);
  }

  /** The object's address, for a C call; a ValueError once closed. */
  objectAddress(what = this.constructor.name) {
    if (this.#address === null) throw libraryError('ValueError', `${what}: the ${this.constructor.name} is closed`);
    return this.#address;
  }

  get closed() { return this.#address === null; }

  /** Drops the reference. Closing again does nothing. */
  close() {
    if (this.#address === null) return;
    finalizer.unregister(this);
    C.dvm_object_dec_ref(this.#address);
    this.#address = null;
  }

  [Symbol.dispose]() { this.close(); }
}

/** A library object with no JS class of its own (a module, a map, ...). */
export class DVMObject extends Handle {}

/** The handle classes by type index (tensor.js and func.js add theirs). */
export const HANDLE_CLASSES = {};

/** The handle of an object whose reference the caller hands over. */
export function wrap(typeIndex, address) {
  const Class = HANDLE_CLASSES[typeIndex] || DVMObject;
  return new Class(address);
}
