package discovm

// #include "shim.h"
import "C"

import (
	"time"
	"unsafe"
)

// Options are a session's options (dvm_session_options); the zero value gives the defaults.
type Options struct {
	// Timeout bounds every wait (sync, copy, register read, shutdown); 0: no bound.
	Timeout time.Duration
	// SpinMicros is how long waiting threads spin before they park (0: the default,
	// negative: park at once).
	SpinMicros int32
	// CPUAffinity pins each worker to a CPU (-1: unpinned); empty or one entry a worker.
	CPUAffinity []int32
	// Devices gives each worker its device; empty (all on the CPU) or one entry a worker.
	Devices []Device
	// WorkerProgram is the program of each worker process (process and socket sessions;
	// "": $DISCOVM_WORKER, else discovm-worker next to the library).
	WorkerProgram string
	// SessionToken is the secret nodes must prove they hold (socket sessions; "":
	// $DISCOVM_SESSION_TOKEN, else nodes may join from the loopback interface only).
	SessionToken string
	// Heartbeat is how long a silent node counts as alive (socket sessions; 0: 2 s).
	Heartbeat time.Duration
	// UploadModules sends a loaded module's bytes to the other nodes (socket sessions).
	UploadModules bool
	// LocalThreads makes this machine's workers threads (socket sessions).
	LocalThreads bool
	// ThreadsPerWorker bounds the OpenMP and BLAS threads of each worker process (process
	// and socket sessions): 0 the machine's cores divided by its workers, -1 the
	// environment's, n that many; a thread variable the environment sets wins.
	ThreadsPerWorker int
}

// cOptions is Options in C memory (the struct, its arrays and strings), freed by free.
type cOptions struct {
	c     *C.dvm_session_options
	alloc []unsafe.Pointer
}

func (o *Options) toC() *cOptions {
	out := &cOptions{}
	out.c = (*C.dvm_session_options)(out.malloc(C.sizeof_dvm_session_options))
	*out.c = C.dvm_session_options{}
	if o == nil {
		return out
	}
	c := out.c
	c.timeout_ms = C.int64_t(o.Timeout.Milliseconds())
	if o.Timeout > 0 && c.timeout_ms == 0 {
		c.timeout_ms = 1
	}
	c.spin_us = C.int32_t(o.SpinMicros)
	if n := len(o.CPUAffinity); n > 0 {
		cpus := (*[1 << 20]C.int32_t)(out.malloc(C.size_t(n) * C.sizeof_int32_t))[:n:n]
		for i, cpu := range o.CPUAffinity {
			cpus[i] = C.int32_t(cpu)
		}
		c.num_cpu_affinity, c.cpu_affinity = C.int32_t(n), &cpus[0]
	}
	if n := len(o.Devices); n > 0 {
		devices := (*[1 << 20]C.DLDevice)(out.malloc(C.size_t(n) * C.sizeof_DLDevice))[:n:n]
		for i, d := range o.Devices {
			devices[i].device_type = C.DLDeviceType(d.Type)
			devices[i].device_id = C.int32_t(d.ID)
		}
		c.num_devices, c.devices = C.int32_t(n), &devices[0]
	}
	c.worker_program = out.cString(o.WorkerProgram)
	c.session_token = out.cString(o.SessionToken)
	c.heartbeat_ms = C.int64_t(o.Heartbeat.Milliseconds())
	if o.UploadModules {
		c.upload_modules = 1
	}
	if o.LocalThreads {
		c.local_threads = 1
	}
	c.threads_per_worker = C.int32_t(o.ThreadsPerWorker)
	return out
}

func (o *cOptions) malloc(n C.size_t) unsafe.Pointer {
	p := C.malloc(n)
	o.alloc = append(o.alloc, p)
	return p
}

// cString is s in C memory, or NULL for "".
func (o *cOptions) cString(s string) *C.char {
	if s == "" {
		return nil
	}
	p := C.CString(s)
	o.alloc = append(o.alloc, unsafe.Pointer(p))
	return p
}

func (o *cOptions) free() {
	for _, p := range o.alloc {
		C.free(p)
	}
}
