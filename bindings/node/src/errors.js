// Library errors as Error subclasses: one class a kind, each carrying `kind`, `status` and the
// library's message, so `err instanceof WorkerError` or `err.kind === 'WorkerError'` asks.

import { C, STATUS_KINDS, STATUS_OTHER } from './ffi.js';

/** A failure the library reported. */
export class DiscovmError extends Error {
  constructor(kind, message, status = statusOf(kind)) {
    super(message);
    this.name = kind;
    this.kind = kind;
    this.status = status;
  }
}

function statusOf(kind) {
  const entry = Object.entries(STATUS_KINDS).find(([, k]) => k === kind);
  return entry ? Number(entry[0]) : STATUS_OTHER;
}

/** The error class of a kind: `new KeyError(message)`. */
function kindClass(kind) {
  return class extends DiscovmError {
    constructor(message, status) { super(kind, message, status); }
  };
}

export const ValueError = kindClass('ValueError');
export const TypeError = kindClass('TypeError');
export const IndexError = kindClass('IndexError');
export const KeyError = kindClass('KeyError');
export const RuntimeError = kindClass('RuntimeError');
export const WorkerError = kindClass('WorkerError');
export const SessionClosed = kindClass('SessionClosed');
export const DeviceUnavailable = kindClass('DeviceUnavailable');
export const TimeoutError = kindClass('TimeoutError');
export const Panic = kindClass('Panic');

const CLASSES = {
  ValueError, TypeError, IndexError, KeyError, RuntimeError, WorkerError, SessionClosed,
  DeviceUnavailable, TimeoutError, Panic,
};

/** The error of `kind` (its class, or DiscovmError for other kinds). */
export function libraryError(kind, message, status) {
  const Class = CLASSES[kind];
  return Class ? new Class(message, status) : new DiscovmError(kind, message, status);
}

/** The error a failed call left on this thread, for `status`. */
export function lastError(status) {
  const kind = C.dvm_last_error_kind() ?? STATUS_KINDS[status] ?? 'RuntimeError';
  return libraryError(kind, C.dvm_last_error_message() ?? '', status);
}

/** Throws the error of a failed call. */
export function check(status) {
  if (status !== 0) throw lastError(status);
}
