package discovm

// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Session is a pool of workers driven from here: threads of this process
// (NewThreadedSession), worker processes (NewProcessSession), or worker processes on
// several machines (NewSocketSession). Calls go to every worker and return at once; the
// next wait (SyncWorker, SyncAll, DRef.Get, a copy) reports a failure on a worker.
type Session struct {
	object
	mu       sync.Mutex
	builtins map[string]*DRef // Disco's built-ins the collectives call, looked up once
}

func newSession(make func(opts *C.dvm_session_options, out **C.dvm_session) C.dvm_status, opts *Options) (*Session, error) {
	c := opts.toC()
	defer c.free()
	var out *C.dvm_session
	if err := check(func() C.dvm_status { return make(c.c, &out) }); err != nil {
		return nil, err
	}
	s := &Session{object: object{unsafe.Pointer(out)}, builtins: map[string]*DRef{}}
	runtime.SetFinalizer(s, (*Session).Close)
	return s, nil
}

// NewThreadedSession starts numWorkers worker threads in numGroups groups of equal size.
// Go functions registered with RegisterGlobal run on these workers.
func NewThreadedSession(numWorkers, numGroups int, opts *Options) (*Session, error) {
	return newSession(func(o *C.dvm_session_options, out **C.dvm_session) C.dvm_status {
		return C.dvm_session_new_threaded(C.int32_t(numWorkers), C.int32_t(numGroups), o, out)
	}, opts)
}

// NewProcessSession starts numWorkers worker processes (opts.WorkerProgram, else
// discovm-worker), which reach the library's built-ins and the functions of modules
// (LoadModule); values cross to them as copies.
func NewProcessSession(numWorkers, numGroups int, opts *Options) (*Session, error) {
	return newSession(func(o *C.dvm_session_options, out **C.dvm_session) C.dvm_status {
		return C.dvm_session_new_process(C.int32_t(numWorkers), C.int32_t(numGroups), o, out)
	}, opts)
}

// NewSocketSession starts a session across numNodes machines of workersPerNode workers
// each: this machine is node 0, and it listens on host:port until every other node (each
// running `discovm-node HOST PORT WORKERS`) joined.
func NewSocketSession(numNodes, workersPerNode, numGroups int, host string, port int, opts *Options) (*Session, error) {
	cHost := C.CString(host)
	defer C.free(unsafe.Pointer(cHost))
	return newSession(func(o *C.dvm_session_options, out **C.dvm_session) C.dvm_status {
		return C.dvm_session_new_socket(C.int32_t(numNodes), C.int32_t(workersPerNode),
			C.int32_t(numGroups), cHost, C.int32_t(port), o, out)
	}, opts)
}

func (s *Session) c() (*C.dvm_session, error) {
	p, err := s.live("session")
	return (*C.dvm_session)(p), err
}

// NumWorkers is the number of workers (0 once closed).
func (s *Session) NumWorkers() int {
	p, err := s.c()
	if err != nil {
		return 0
	}
	defer runtime.KeepAlive(s)
	return int(C.dvm_session_num_workers(p))
}

// drefCall runs a C call that makes a DRef.
func (s *Session) drefCall(call func(p *C.dvm_session, out **C.dvm_dref) C.dvm_status) (*DRef, error) {
	p, err := s.c()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(s)
	var out *C.dvm_dref
	if err := check(func() C.dvm_status { return call(p, &out) }); err != nil {
		return nil, err
	}
	return newDRef(out), nil
}

// GetGlobalFunc is a DRef to the global function name on every worker; a name no worker
// has fails here, with a KeyError.
func (s *Session) GetGlobalFunc(name string) (*DRef, error) {
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	return s.drefCall(func(p *C.dvm_session, out **C.dvm_dref) C.dvm_status {
		return C.dvm_session_get_global_func(p, cName, out)
	})
}

// LoadModule loads the shared library at path on every worker (after the calls sent
// before); ModuleFunc reaches its functions (`__tvm_ffi_<name>` exports).
func (s *Session) LoadModule(path string) (*DRef, error) {
	cPath := C.CString(path)
	defer C.free(unsafe.Pointer(cPath))
	return s.drefCall(func(p *C.dvm_session, out **C.dvm_dref) C.dvm_status {
		return C.dvm_session_load_module(p, cPath, out)
	})
}

// ModuleFunc is a DRef to the function name of the module every worker holds in module.
func (s *Session) ModuleFunc(module *DRef, name string) (*DRef, error) {
	m, err := module.c()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(module)
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	return s.drefCall(func(p *C.dvm_session, out **C.dvm_dref) C.dvm_status {
		return C.dvm_session_module_func(p, m, cName, out)
	})
}

// Call calls the function in fn on every worker with args (Go values; a DRef gives each
// worker its own value) and returns at once with a DRef to the results.
func (s *Session) Call(fn *DRef, args ...any) (*DRef, error) {
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
	return s.drefCall(func(p *C.dvm_session, out **C.dvm_dref) C.dvm_status {
		return C.dvm_session_call(p, f, a.ptr(), a.count(), out)
	})
}

// status runs a C call on the session that returns a status.
func (s *Session) status(call func(p *C.dvm_session) C.dvm_status) error {
	p, err := s.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	return check(func() C.dvm_status { return call(p) })
}

// SyncWorker waits until every call sent so far to worker has finished, and reports the
// first failure there (a WorkerError naming the worker, the function and the cause).
func (s *Session) SyncWorker(worker int) error {
	return s.status(func(p *C.dvm_session) C.dvm_status {
		return C.dvm_session_sync_worker(p, C.int32_t(worker))
	})
}

// SyncAll waits until every call sent so far to every worker has finished.
func (s *Session) SyncAll() error {
	return s.status(func(p *C.dvm_session) C.dvm_status { return C.dvm_session_sync_all(p) })
}

// LiveRegisters is how many registers hold a value on worker (0 once every DRef is closed).
func (s *Session) LiveRegisters(worker int) (int64, error) {
	var n C.int64_t
	err := s.status(func(p *C.dvm_session) C.dvm_status {
		return C.dvm_session_live_registers(p, C.int32_t(worker), &n)
	})
	return int64(n), err
}

// CopyToWorker0 copies host (a numeric slice holding a compact tensor of shape) into the
// tensor dst holds on worker 0, and returns when it is there.
func (s *Session) CopyToWorker0(host any, shape Shape, dst *DRef) error {
	return s.copyHost(host, shape, dst, true)
}

// CopyFromWorker0 copies the tensor src holds on worker 0 into host (a numeric slice of
// shape's size); host is filled when it returns.
func (s *Session) CopyFromWorker0(host any, shape Shape, src *DRef) error {
	return s.copyHost(host, shape, src, false)
}

func (s *Session) copyHost(host any, shape Shape, remote *DRef, to bool) error {
	r, err := remote.c()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(remote)
	mem, err := hostMemory(host)
	if err != nil {
		return err
	}
	if n := shape.elements(); n != mem.length {
		return errorf(ValueError, "the host slice has %d elements, the shape %v has %d", mem.length, shape, n)
	}
	dims := (*C.int64_t)(nil)
	if len(shape) > 0 {
		dims = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	dtype := C.DLDataType{code: C.uint8_t(mem.dtype.Code), bits: C.uint8_t(mem.dtype.Bits), lanes: C.uint16_t(mem.dtype.Lanes)}
	defer runtime.KeepAlive(host)
	return s.status(func(p *C.dvm_session) C.dvm_status {
		if to {
			return C.dvm_go_copy_to_worker0(p, mem.data, dims, C.int32_t(len(shape)), dtype, r)
		}
		return C.dvm_go_copy_from_worker0(p, mem.data, dims, C.int32_t(len(shape)), dtype, r)
	})
}

// Worker is a handle to one worker, for calls to it alone.
func (s *Session) Worker(id int) (*Worker, error) {
	var out *C.dvm_worker
	err := s.status(func(p *C.dvm_session) C.dvm_status {
		return C.dvm_session_worker(p, C.int32_t(id), &out)
	})
	if err != nil {
		return nil, err
	}
	return newWorker(out), nil
}

// Shutdown stops the workers once the work sent has run; every later call on the session
// fails with SessionClosed. Shutting down again does nothing.
func (s *Session) Shutdown() error {
	s.mu.Lock()
	for name, d := range s.builtins {
		d.Close()
		delete(s.builtins, name)
	}
	s.mu.Unlock()
	return s.status(func(p *C.dvm_session) C.dvm_status { return C.dvm_session_shutdown(p) })
}

// Close shuts the session down and drops it. Closing again does nothing.
func (s *Session) Close() error {
	if s.ptr == nil {
		return nil
	}
	err := s.Shutdown()
	s.release()
	runtime.SetFinalizer(s, nil)
	return err
}

// String names the session for messages.
func (s *Session) String() string { return fmt.Sprintf("discovm.Session(%d workers)", s.NumWorkers()) }
