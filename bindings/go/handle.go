package discovm

// #include "shim.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// object is one reference to a C object, which every handle type embeds: Close drops it
// (every handle is an object, and its dvm_*_free is dvm_object_dec_ref) and clears the
// finalizer, which drops it for a handle its user forgot to close (clearing it keeps a
// closed handle off the finalizer queue: a call's DRef then costs a third as much).
type object struct {
	ptr unsafe.Pointer
}

func (o *object) objectPtr() unsafe.Pointer { return o.ptr }

// release drops the reference, once.
func (o *object) release() {
	if o.ptr != nil {
		C.dvm_object_dec_ref(o.ptr)
		o.ptr = nil
	}
}

// live is the object, or a ValueError naming what was closed.
func (o *object) live(what string) (unsafe.Pointer, error) {
	if o.ptr == nil {
		return nil, errorf(ValueError, "the %s is closed", what)
	}
	return o.ptr, nil
}

// keepAlive keeps h (and so its finalizer) from running before this point.
func keepAlive(h handle) { runtime.KeepAlive(h) }

// Object is a library object with no Go type of its own (a module, a map, ...): it can be
// passed back as an argument, and closed.
type Object struct{ object }

func newObject(p unsafe.Pointer) *Object {
	o := &Object{object{p}}
	runtime.SetFinalizer(o, (*Object).Close)
	return o
}

// TypeIndex is the object's type index (tvm-ffi's, or one allocated at run time).
func (o *Object) TypeIndex() int32 {
	if o.ptr == nil {
		return -1
	}
	defer runtime.KeepAlive(o)
	return int32((*C.DVMObject)(o.ptr).type_index)
}

// Close drops the reference. Closing again does nothing.
func (o *Object) Close() {
	if o.ptr != nil {
		o.release()
		runtime.SetFinalizer(o, nil)
	}
}
