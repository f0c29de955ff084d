package discovm

// #include "shim.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Tensor is a tensor of the library's VM (a Tensor object): it remembers the stream that
// last used it, so reads, writes and copies on other streams wait for that use.
type Tensor struct{ object }

func newTensor(p *C.dvm_tensor) *Tensor {
	t := &Tensor{object{unsafe.Pointer(p)}}
	runtime.SetFinalizer(t, (*Tensor).Close)
	return t
}

// NewTensor allocates a compact tensor on device (zero-filled on the CPU).
func NewTensor(shape Shape, dtype DataType, device Device) (*Tensor, error) {
	dims := (*C.int64_t)(nil)
	if len(shape) > 0 {
		dims = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	cType := C.DLDataType{code: C.uint8_t(dtype.Code), bits: C.uint8_t(dtype.Bits), lanes: C.uint16_t(dtype.Lanes)}
	cDevice := C.DLDevice{device_type: C.DLDeviceType(device.Type), device_id: C.int32_t(device.ID)}
	var out *C.dvm_tensor
	err := check(func() C.dvm_status { return C.dvm_tensor_empty(dims, C.int32_t(len(shape)), cType, cDevice, &out) })
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

func (t *Tensor) c() (*C.dvm_tensor, error) {
	p, err := t.live("tensor")
	return (*C.dvm_tensor)(p), err
}

// dl is the tensor's DLTensor; the caller keeps t alive while it reads it.
func (t *Tensor) dl() *C.DLTensor {
	p, err := t.c()
	if err != nil {
		return nil
	}
	return C.dvm_tensor_dl(p)
}

// Shape is the tensor's shape (nil once closed).
func (t *Tensor) Shape() Shape {
	defer runtime.KeepAlive(t)
	dl := t.dl()
	if dl == nil {
		return nil
	}
	shape := make(Shape, int(dl.ndim))
	copy(shape, unsafe.Slice((*int64)(unsafe.Pointer(dl.shape)), int(dl.ndim)))
	return shape
}

// DataType is the tensor's data type.
func (t *Tensor) DataType() DataType {
	defer runtime.KeepAlive(t)
	dl := t.dl()
	if dl == nil {
		return DataType{}
	}
	return DataType{uint8(dl.dtype.code), uint8(dl.dtype.bits), uint16(dl.dtype.lanes)}
}

// Device is the tensor's device.
func (t *Tensor) Device() Device {
	defer runtime.KeepAlive(t)
	dl := t.dl()
	if dl == nil {
		return Device{}
	}
	return Device{int32(dl.device.device_type), int32(dl.device.device_id)}
}

// Read copies the tensor's first bytes into dst (a numeric slice), after every earlier use
// of the tensor on any stream; it returns when they are there.
func (t *Tensor) Read(dst any) error {
	return t.transfer(dst, func(p *C.dvm_tensor, data unsafe.Pointer, n C.size_t) C.dvm_status {
		return C.dvm_tensor_read(p, data, n)
	})
}

// Write copies src (a numeric slice) into the tensor's first bytes, after every earlier use
// of the tensor on any stream; it returns when they are there.
func (t *Tensor) Write(src any) error {
	return t.transfer(src, func(p *C.dvm_tensor, data unsafe.Pointer, n C.size_t) C.dvm_status {
		return C.dvm_tensor_write(p, data, n)
	})
}

func (t *Tensor) transfer(slice any, call func(*C.dvm_tensor, unsafe.Pointer, C.size_t) C.dvm_status) error {
	p, err := t.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(t)
	mem, err := hostMemory(slice)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(slice)
	return check(func() C.dvm_status { return call(p, mem.data, C.size_t(mem.bytes)) })
}

// Close drops the reference; work still queued that uses the tensor keeps it alive until it
// ran. Closing again does nothing.
func (t *Tensor) Close() {
	if t.ptr != nil {
		t.release()
		runtime.SetFinalizer(t, nil)
	}
}

// Stream runs copies in order on one device.
type Stream struct{ object }

// NewStream makes a stream on device.
func NewStream(device Device) (*Stream, error) {
	cDevice := C.DLDevice{device_type: C.DLDeviceType(device.Type), device_id: C.int32_t(device.ID)}
	var out *C.dvm_stream
	if err := check(func() C.dvm_status { return C.dvm_stream_new(cDevice, &out) }); err != nil {
		return nil, err
	}
	s := &Stream{object{unsafe.Pointer(out)}}
	runtime.SetFinalizer(s, (*Stream).Close)
	return s, nil
}

func (s *Stream) c() (*C.dvm_stream, error) {
	p, err := s.live("stream")
	return (*C.dvm_stream)(p), err
}

// Copy queues a copy of src into dst on the stream and returns at once; later uses of dst
// (and writes of either) wait for it.
func (s *Stream) Copy(dst, src *Tensor) error {
	p, err := s.c()
	if err != nil {
		return err
	}
	d, err := dst.c()
	if err != nil {
		return err
	}
	from, err := src.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	defer runtime.KeepAlive(dst)
	defer runtime.KeepAlive(src)
	return check(func() C.dvm_status { return C.dvm_tensor_copy(d, from, p) })
}

// Wait makes work submitted to s from now on wait for everything submitted to signaler so
// far (the calling goroutine does not wait).
func (s *Stream) Wait(signaler *Stream) error {
	p, err := s.c()
	if err != nil {
		return err
	}
	q, err := signaler.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	defer runtime.KeepAlive(signaler)
	return check(func() C.dvm_status { return C.dvm_stream_wait(p, q) })
}

// Sync waits until everything submitted to the stream has run, and reports its first
// failure since the last sync.
func (s *Stream) Sync() error {
	p, err := s.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	return check(func() C.dvm_status { return C.dvm_stream_sync(p) })
}

// Close drops the reference; the stream first finishes its work. Closing again does nothing.
func (s *Stream) Close() {
	if s.ptr != nil {
		s.release()
		runtime.SetFinalizer(s, nil)
	}
}

// DeviceCount is how many devices of a type (CPU, CUDA, CUDAHost) the library can use.
func DeviceCount(deviceType int32) (int, error) {
	var n C.int32_t
	if err := check(func() C.dvm_status { return C.dvm_device_count(C.int32_t(deviceType), &n) }); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Version is the library's version, e.g. "0.1.0".
func Version() string { return C.GoString(C.dvm_version()) }
