package discovm

// #include "shim.h"
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// Shape is a tensor shape (a Shape object when passed to a function).
type Shape []int64

// DataType is a DLPack data type: code (DLDataTypeCode), bits and lanes.
type DataType struct {
	Code  uint8
	Bits  uint8
	Lanes uint16
}

// The data types Go slices have.
var (
	Int8    = DataType{0, 8, 1}
	Int16   = DataType{0, 16, 1}
	Int32   = DataType{0, 32, 1}
	Int64   = DataType{0, 64, 1}
	Uint8   = DataType{1, 8, 1}
	Uint16  = DataType{1, 16, 1}
	Uint32  = DataType{1, 32, 1}
	Uint64  = DataType{1, 64, 1}
	Float32 = DataType{2, 32, 1}
	Float64 = DataType{2, 64, 1}
)

// Device is a DLPack device: type (1 CPU, 2 CUDA, 3 CUDA host memory) and id.
type Device struct {
	Type int32
	ID   int32
}

// The device types with a backend.
const (
	CPU      int32 = 1
	CUDA     int32 = 2
	CUDAHost int32 = 3
)

// HostCPU is the host's device.
var HostCPU = Device{CPU, 0}

// The type indices of tvm-ffi's value model that cross here.
const (
	tiNone       = 0
	tiInt        = 1
	tiBool       = 2
	tiFloat      = 3
	tiOpaquePtr  = 4
	tiDataType   = 5
	tiDevice     = 6
	tiRawStr     = 8
	tiSmallStr   = 11
	tiSmallBytes = 12
	tiStr        = 65
	tiBytes      = 66
	tiFunction   = 68
	tiShape      = 69
	tiTensor     = 70
	tiArray      = 71
	tiObjects    = 64
)

// value has DVMAny's layout (16 bytes, asserted in discovm_abi.h): a type index, a small
// string's length, and 8 bytes of payload, kept as bits so Go never mistakes them for a Go
// pointer.
type value struct {
	typeIndex int32
	smallLen  uint32
	payload   uint64
}

func (v *value) c() *C.DVMAny { return (*C.DVMAny)(unsafe.Pointer(v)) }

// object is the object a value holds.
func (v *value) object() unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&v.payload))
}

// handle is any Go value that owns a C object (sessions' DRefs, tensors, functions...).
type handle interface {
	objectPtr() unsafe.Pointer
}

// objectValue is a borrowed value naming the object o.
func objectValue(o unsafe.Pointer) value {
	return value{
		typeIndex: int32((*C.DVMObject)(o).type_index),
		payload:   uint64(uintptr(o)),
	}
}

// args holds the values of one call's arguments, and releases those it made.
type args struct {
	values []value
	owned  []int
	keep   []handle
}

// newArgs converts Go values to packed arguments; a value of another type is a TypeError
// naming the argument.
func newArgs(goArgs []any) (*args, error) {
	a := &args{values: make([]value, len(goArgs))}
	for i, arg := range goArgs {
		if err := a.set(i, arg); err != nil {
			a.release()
			return nil, err
		}
	}
	return a, nil
}

func (a *args) set(i int, arg any) error {
	v := &a.values[i]
	switch x := arg.(type) {
	case nil:
	case bool:
		v.typeIndex = tiBool
		if x {
			v.payload = 1
		}
	case int:
		*v = intValue(int64(x))
	case int8:
		*v = intValue(int64(x))
	case int16:
		*v = intValue(int64(x))
	case int32:
		*v = intValue(int64(x))
	case int64:
		*v = intValue(x)
	case uint8:
		*v = intValue(int64(x))
	case uint16:
		*v = intValue(int64(x))
	case uint32:
		*v = intValue(int64(x))
	case uint64:
		if x > math.MaxInt64 {
			return errorf(ValueError, "argument %d: %d does not fit in an int64", i, x)
		}
		*v = intValue(int64(x))
	case float32:
		*v = value{typeIndex: tiFloat, payload: math.Float64bits(float64(x))}
	case float64:
		*v = value{typeIndex: tiFloat, payload: math.Float64bits(x)}
	case DataType:
		*v = value{typeIndex: tiDataType, payload: uint64(x.Code) | uint64(x.Bits)<<8 | uint64(x.Lanes)<<16}
	case Device:
		*v = value{typeIndex: tiDevice, payload: uint64(uint32(x.Type)) | uint64(uint32(x.ID))<<32}
	case string, []byte, Shape:
		made, err := ownedValue(x)
		if err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
		*v = made
		a.owned = append(a.owned, i)
	case handle:
		o := x.objectPtr()
		if o == nil {
			return errorf(ValueError, "argument %d: a closed %T", i, x)
		}
		*v = objectValue(o)
		a.keep = append(a.keep, x)
	default:
		return errorf(TypeError, "argument %d: a Go %T cannot be passed (pass nil, bool, "+
			"integers, floats, string, []byte, Shape, DataType, Device, *DRef, *Tensor or *Func)", i, arg)
	}
	return nil
}

func intValue(x int64) value { return value{typeIndex: tiInt, payload: uint64(x)} }

// ownedValue makes the owned value of a string, byte string or shape.
func ownedValue(x any) (value, error) {
	var v value
	var err error
	switch x := x.(type) {
	case string:
		data := C.CString(x)
		defer C.free(unsafe.Pointer(data))
		err = check(func() C.dvm_status { return C.dvm_string_new(data, C.size_t(len(x)), v.c()) })
	case []byte:
		var data unsafe.Pointer
		if len(x) > 0 {
			data = unsafe.Pointer(&x[0])
		}
		err = check(func() C.dvm_status { return C.dvm_bytes_new(data, C.size_t(len(x)), v.c()) })
	case Shape:
		var dims *C.int64_t
		if len(x) > 0 {
			dims = (*C.int64_t)(unsafe.Pointer(&x[0]))
		}
		err = check(func() C.dvm_status { return C.dvm_shape_new(dims, C.int32_t(len(x)), v.c()) })
	}
	return v, err
}

// ptr is the first value, for C (nil without arguments).
func (a *args) ptr() *C.DVMAny {
	if len(a.values) == 0 {
		return nil
	}
	return a.values[0].c()
}

func (a *args) count() C.int32_t { return C.int32_t(len(a.values)) }

// release drops the values the arguments made, once the call is done with them.
func (a *args) release() {
	for _, i := range a.owned {
		C.dvm_any_release(a.values[i].c())
	}
	a.owned = nil
	for _, h := range a.keep {
		keepAlive(h)
	}
	a.keep = nil
}

// goValue converts an owned value to Go, taking over its reference: numbers, strings, byte
// strings, shapes and arrays are copied (and the value released), objects become handles
// (*Tensor, *Func, or *Object for the others).
func goValue(v value) (any, error) {
	switch v.typeIndex {
	case tiNone:
		return nil, nil
	case tiInt:
		return int64(v.payload), nil
	case tiBool:
		return v.payload != 0, nil
	case tiFloat:
		return math.Float64frombits(v.payload), nil
	case tiOpaquePtr:
		return uintptr(v.payload), nil
	case tiDataType:
		return DataType{uint8(v.payload), uint8(v.payload >> 8), uint16(v.payload >> 16)}, nil
	case tiDevice:
		return Device{int32(uint32(v.payload)), int32(uint32(v.payload >> 32))}, nil
	case tiRawStr, tiSmallStr, tiStr, tiSmallBytes, tiBytes:
		b := C.dvm_go_bytes_of(v.c())
		data := C.GoBytes(unsafe.Pointer(b.data), C.int(b.size))
		isBytes := v.typeIndex == tiSmallBytes || v.typeIndex == tiBytes
		C.dvm_any_release(v.c())
		if isBytes {
			return data, nil
		}
		return string(data), nil
	case tiShape:
		cell := C.dvm_go_shape_of(v.c())
		shape := make(Shape, int(cell.size))
		copy(shape, unsafe.Slice((*int64)(unsafe.Pointer(cell.data)), int(cell.size)))
		C.dvm_any_release(v.c())
		return shape, nil
	case tiArray:
		return arrayValue(v)
	case tiTensor:
		return newTensor((*C.dvm_tensor)(v.object())), nil
	case tiFunction:
		return newFunc((*C.dvm_func)(v.object())), nil
	}
	if v.typeIndex >= tiObjects {
		return newObject(v.object()), nil
	}
	C.dvm_any_release(v.c())
	return nil, errorf(TypeError, "a value of type index %d has no Go form", v.typeIndex)
}

// arrayValue converts an Array's elements (each taking a reference of its own).
func arrayValue(v value) (any, error) {
	defer C.dvm_any_release(v.c())
	var size C.int64_t
	first := C.dvm_go_array_of(v.c(), &size)
	elements := unsafe.Slice((*value)(unsafe.Pointer(first)), int(size))
	out := make([]any, len(elements))
	for i, e := range elements {
		element, err := borrowedGoValue(e)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = element
	}
	return out, nil
}

// borrowedGoValue converts a borrowed value, taking a reference of its own to an object.
func borrowedGoValue(v value) (any, error) {
	if v.typeIndex >= tiObjects {
		C.dvm_object_inc_ref(v.object())
	} else if v.typeIndex == tiRawStr {
		b := C.dvm_go_bytes_of(v.c())
		return C.GoStringN(b.data, C.int(b.size)), nil
	}
	return goValue(v)
}
