// discovm for Node.js: sessions of workers, streams and tensors over the C library, loaded
// with koffi. Every handle owns one reference (close(), or a FinalizationRegistry); library
// failures are Error subclasses carrying the kind; JS functions run on the JS thread when
// workers call them, so sessions that call them wait with the async methods.

export { Session, DRef, Worker } from './session.js';
export { Func, registerGlobal, getGlobal, removeGlobal, globalNames, currentWorkerId } from './func.js';
export { Tensor, Stream, dtypes, cpu, deviceCount, version } from './tensor.js';
export { Shape, DataType, Device } from './values.js';
export { DVMObject } from './handles.js';
export {
  DiscovmError, ValueError, TypeError, IndexError, KeyError, RuntimeError, WorkerError,
  SessionClosed, DeviceUnavailable, TimeoutError, Panic,
} from './errors.js';
