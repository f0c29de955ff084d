package discovm

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// GoFunc is a Go function callable as a packed function: it gets the call's arguments as Go
// values (as DRef.Get gives them) and returns its result (a value Call accepts) or an error,
// which reaches the caller with its kind (a Kind, or an *Error's; RuntimeError otherwise).
type GoFunc func(args ...any) (any, error)

// Func is a packed function: one of the library's, a Go function (NewFunc), or one that
// came back from a call.
type Func struct{ object }

func newFunc(p *C.dvm_func) *Func {
	f := &Func{object{unsafe.Pointer(p)}}
	runtime.SetFinalizer(f, (*Func).Close)
	return f
}

func (f *Func) c() (*C.dvm_func, error) {
	p, err := f.live("function")
	return (*C.dvm_func)(p), err
}

// NewFunc makes a packed function of fn. Called on a session's worker threads, fn runs on
// the worker's thread (CurrentWorkerID says which); a panic in it becomes a Panic error.
func NewFunc(fn GoFunc) (*Func, error) {
	if fn == nil {
		return nil, errorf(ValueError, "the Go function is nil")
	}
	h := cgo.NewHandle(fn)
	var out *C.dvm_func
	if err := check(func() C.dvm_status { return C.dvm_go_func_new(C.uintptr_t(h), &out) }); err != nil {
		h.Delete()
		return nil, err
	}
	return newFunc(out), nil
}

// RegisterGlobal registers fn under name in the process's registry, where threaded
// sessions' workers find it (Session.GetGlobalFunc); a name taken is a ValueError.
func RegisterGlobal(name string, fn GoFunc) error {
	f, err := NewFunc(fn)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Register(name, false)
}

// Register registers f under name (the registry keeps its own reference); override
// replaces a function registered before.
func (f *Func) Register(name string, override bool) error {
	p, err := f.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(f)
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	allow := C.int32_t(0)
	if override {
		allow = 1
	}
	return check(func() C.dvm_status { return C.dvm_func_register_global(cName, p, allow) })
}

// GetGlobal is the global function name; a name not registered is a KeyError.
func GetGlobal(name string) (*Func, error) {
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	var out *C.dvm_func
	if err := check(func() C.dvm_status { return C.dvm_func_get_global(cName, &out) }); err != nil {
		return nil, err
	}
	return newFunc(out), nil
}

// RemoveGlobal removes the global function name; a name not registered is a KeyError.
func RemoveGlobal(name string) error {
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	return check(func() C.dvm_status { return C.dvm_func_remove_global(cName) })
}

// GlobalNames lists the global functions' names, sorted.
func GlobalNames() ([]string, error) {
	var v value
	if err := check(func() C.dvm_status { return C.dvm_func_list_global_names(v.c()) }); err != nil {
		return nil, err
	}
	list, err := goValue(v)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.([]any)))
	for _, n := range list.([]any) {
		names = append(names, n.(string))
	}
	return names, nil
}

// Call calls f here, on this goroutine, and returns its result as a Go value.
func (f *Func) Call(args ...any) (any, error) {
	p, err := f.c()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	a, err := newArgs(args)
	if err != nil {
		return nil, err
	}
	defer a.release()
	var result value
	if err := check(func() C.dvm_status { return C.dvm_func_call(p, a.ptr(), a.count(), result.c()) }); err != nil {
		return nil, err
	}
	return goValue(result)
}

// Close drops the reference (a registered function stays in the registry). Closing again
// does nothing.
func (f *Func) Close() {
	if f.ptr != nil {
		f.release()
		runtime.SetFinalizer(f, nil)
	}
}

//export goCallFunc
func goCallFunc(h C.uintptr_t, args *C.DVMAny, numArgs C.int32_t, result *C.DVMAny) C.int32_t {
	fn := cgo.Handle(h).Value().(GoFunc)
	out, err := callGo(fn, unsafe.Slice((*value)(unsafe.Pointer(args)), int(numArgs)))
	if err == nil {
		var v value
		if v, err = resultValue(out); err == nil {
			*(*value)(unsafe.Pointer(result)) = v
			return 0
		}
	}
	raise(err)
	return -1
}

//export goDeleteFunc
func goDeleteFunc(h C.uintptr_t) { cgo.Handle(h).Delete() }

// callGo runs fn with the borrowed arguments in Go form, a panic becoming a Panic error.
func callGo(fn GoFunc, in []value) (out any, err error) {
	goArgs := make([]any, len(in))
	for i, v := range in {
		if goArgs[i], err = borrowedGoValue(v); err != nil {
			return nil, fmt.Errorf("argument %d: %w", i, err)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err = errorf(Panic, "the Go function panicked: %v", p)
		}
	}()
	return fn(goArgs...)
}

// resultValue is the owned value of a Go function's result.
func resultValue(out any) (value, error) {
	switch x := out.(type) {
	case string, []byte, Shape:
		return ownedValue(x)
	case handle:
		o := x.objectPtr()
		if o == nil {
			return value{}, errorf(ValueError, "the result: a closed %T", x)
		}
		C.dvm_object_inc_ref(o)
		defer keepAlive(x)
		return objectValue(o), nil
	}
	a, err := newArgs([]any{out})
	if err != nil {
		return value{}, fmt.Errorf("the result: %w", err)
	}
	return a.values[0], nil
}

// raise raises err on this thread (the worker's, which runs the Go function) for its caller.
func raise(err error) {
	kind := RuntimeError
	var e *Error
	var k Kind
	if errors.As(err, &e) {
		kind = e.Kind
	} else if errors.As(err, &k) {
		kind = k
	}
	message := err.Error()
	if e, ok := err.(*Error); ok {
		message = e.Message
	}
	cKind, cMessage := C.CString(string(kind)), C.CString(message)
	C.dvm_error_raise(cKind, cMessage)
	C.free(unsafe.Pointer(cKind))
	C.free(unsafe.Pointer(cMessage))
}
