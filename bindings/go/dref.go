package discovm

// #include "shim.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// DRef is a remote reference: the same register on every worker of a session, holding each
// worker's result of a call. Passed as an argument, each worker gets its own value.
type DRef struct{ object }

func newDRef(p *C.dvm_dref) *DRef {
	d := &DRef{object{unsafe.Pointer(p)}}
	runtime.SetFinalizer(d, (*DRef).Close)
	return d
}

func (d *DRef) c() (*C.dvm_dref, error) {
	if d == nil {
		return nil, errorf(ValueError, "the DRef is nil")
	}
	p, err := d.live("DRef")
	return (*C.dvm_dref)(p), err
}

// Get is the value the register holds on worker, after every call sent before, as a Go
// value (int64, float64, bool, string, []byte, Shape, DataType, Device, []any, *Tensor,
// *Func, *Object or nil). A failed call that should have filled it is a WorkerError.
func (d *DRef) Get(worker int) (any, error) {
	p, err := d.c()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(d)
	var v value
	if err := check(func() C.dvm_status { return C.dvm_dref_get(p, C.int32_t(worker), v.c()) }); err != nil {
		return nil, err
	}
	return goValue(v)
}

// Set sets the register's value on worker (a Go value, as for calls), after every call
// sent before; it returns at once.
func (d *DRef) Set(worker int, v any) error {
	p, err := d.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(d)
	a, err := newArgs([]any{v})
	if err != nil {
		return err
	}
	defer a.release()
	return check(func() C.dvm_status { return C.dvm_dref_set(p, C.int32_t(worker), a.ptr()) })
}

// Close drops the reference; the register is freed on every worker once the last one goes.
// Closing again does nothing.
func (d *DRef) Close() {
	if d.ptr != nil {
		d.release()
		runtime.SetFinalizer(d, nil)
	}
}
