package discovm

// #include "shim.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// ReduceOp is a reduction of AllReduce.
type ReduceOp int64

// The reductions, numbered as Disco numbers them.
const (
	Sum ReduceOp = iota
	Prod
	Min
	Max
	Avg
)

// InitCCL sets up collectives between the workers: "cpu" (shared memory, every worker on
// the CPU) or "nccl" (a GPU a worker); deviceIDs may be empty or give each worker's device.
func (s *Session) InitCCL(backend string, deviceIDs ...int32) error {
	cBackend := C.CString(backend)
	defer C.free(unsafe.Pointer(cBackend))
	var ids *C.int32_t
	if len(deviceIDs) > 0 {
		ids = (*C.int32_t)(unsafe.Pointer(&deviceIDs[0]))
	}
	defer runtime.KeepAlive(deviceIDs)
	return s.status(func(p *C.dvm_session) C.dvm_status {
		return C.dvm_session_init_ccl(p, cBackend, ids, C.int32_t(len(deviceIDs)))
	})
}

// Empty allocates an uninitialised tensor on every worker (on each worker's device), or on
// worker 0 of each group alone with worker0Only (the others hold None).
func (s *Session) Empty(shape Shape, dtype DataType, worker0Only bool) (*DRef, error) {
	fn, err := s.builtin("runtime.disco.empty")
	if err != nil {
		return nil, err
	}
	return s.Call(fn, shape, dtype, nil, worker0Only, true)
}

// AllReduce reduces src across the workers (of each group, with inGroup) into every
// worker's dst; it returns at once, as calls do.
func (s *Session) AllReduce(src, dst *DRef, op ReduceOp, inGroup bool) error {
	return s.collective("runtime.disco.allreduce", src, Shape{int64(op)}, inGroup, dst)
}

// AllGather gathers every worker's src into every worker's dst.
func (s *Session) AllGather(src, dst *DRef, inGroup bool) error {
	return s.collective("runtime.disco.allgather", src, inGroup, dst)
}

// BroadcastFromWorker0 copies worker 0's src into every worker's dst.
func (s *Session) BroadcastFromWorker0(src, dst *DRef, inGroup bool) error {
	return s.collective("runtime.disco.broadcast_from_worker0", src, inGroup, dst)
}

// ScatterFromWorker0 scatters worker 0's src along its first dimension into each worker's dst.
func (s *Session) ScatterFromWorker0(src, dst *DRef, inGroup bool) error {
	return s.collective("runtime.disco.scatter_from_worker0", src, inGroup, dst)
}

// GatherToWorker0 gathers every worker's src into worker 0's dst (stacked along a new first
// dimension).
func (s *Session) GatherToWorker0(src, dst *DRef, inGroup bool) error {
	return s.collective("runtime.disco.gather_to_worker0", src, inGroup, dst)
}

// Barrier makes every worker wait until all reached it.
func (s *Session) Barrier() error { return s.collective("runtime.disco.barrier") }

// collective calls the built-in name on every worker.
func (s *Session) collective(name string, args ...any) error {
	fn, err := s.builtin(name)
	if err != nil {
		return err
	}
	out, err := s.Call(fn, args...)
	if err != nil {
		return err
	}
	out.Close()
	return nil
}

// builtin is a DRef to one of Disco's built-ins, looked up once a session.
func (s *Session) builtin(name string) (*DRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn, ok := s.builtins[name]; ok {
		return fn, nil
	}
	fn, err := s.GetGlobalFunc(name)
	if err != nil {
		return nil, err
	}
	s.builtins[name] = fn
	return fn, nil
}
