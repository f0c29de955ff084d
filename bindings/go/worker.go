package discovm

// #include "shim.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Worker is one worker of a session, for calls to it alone (it keeps the session alive).
type Worker struct{ object }

func newWorker(p *C.dvm_worker) *Worker {
	w := &Worker{object{unsafe.Pointer(p)}}
	runtime.SetFinalizer(w, (*Worker).Close)
	return w
}

func (w *Worker) c() (*C.dvm_worker, error) {
	p, err := w.live("worker")
	return (*C.dvm_worker)(p), err
}

// ID is the worker's id (-1 once closed).
func (w *Worker) ID() int {
	p, err := w.c()
	if err != nil {
		return -1
	}
	defer runtime.KeepAlive(w)
	return int(C.dvm_worker_id(p))
}

// Call calls the function in fn on this worker only; the result DRef holds a value here.
func (w *Worker) Call(fn *DRef, args ...any) (*DRef, error) {
	p, err := w.c()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(w)
	f, err := fn.c()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(fn)
	a, err := newArgs(args)
	if err != nil {
		return nil, err
	}
	defer a.release()
	var out *C.dvm_dref
	if err := check(func() C.dvm_status { return C.dvm_worker_call(p, f, a.ptr(), a.count(), &out) }); err != nil {
		return nil, err
	}
	return newDRef(out), nil
}

// Sync waits until every call sent so far to this worker has finished.
func (w *Worker) Sync() error {
	p, err := w.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	return check(func() C.dvm_status { return C.dvm_worker_sync(p) })
}

// Device is the worker's device.
func (w *Worker) Device() (Device, error) {
	p, err := w.c()
	if err != nil {
		return Device{}, err
	}
	defer runtime.KeepAlive(w)
	var d C.DLDevice
	if err := check(func() C.dvm_status { return C.dvm_worker_device(p, &d) }); err != nil {
		return Device{}, err
	}
	return Device{int32(d.device_type), int32(d.device_id)}, nil
}

// Close drops the handle. Closing again does nothing.
func (w *Worker) Close() {
	if w.ptr != nil {
		w.release()
		runtime.SetFinalizer(w, nil)
	}
}

// CurrentWorkerID is the id of the worker running the calling Go function, or -1 off
// worker threads. A Go function running on a worker is locked to the worker's thread while
// it runs, so this is the worker that called it.
func CurrentWorkerID() int { return int(C.dvm_current_worker_id()) }

// CurrentWorker is a handle to the worker running the calling Go function (a RuntimeError
// off worker threads).
func CurrentWorker() (*Worker, error) {
	var out *C.dvm_worker
	if err := check(func() C.dvm_status { return C.dvm_current_worker(&out) }); err != nil {
		return nil, err
	}
	C.dvm_object_inc_ref(unsafe.Pointer(out))
	return newWorker(out), nil
}
