package discovm

// #include <stdlib.h>
// #include "shim.h"
import "C"

import "unsafe"

// TraceStart begins a trace of the session: every worker's calls, syncs, collectives and module
// loads, and this controller's sends, syncs and copies, are kept until TraceStop. It fails with
// ValueError when a trace runs already, and with SessionClosed after Shutdown.
func (s *Session) TraceStart() error {
	return s.status(func(p *C.dvm_session) C.dvm_status { return C.dvm_session_trace_start(p) })
}

// TraceStop ends the trace and writes it to the file path in the Chrome Trace Event Format,
// which ui.perfetto.dev and chrome://tracing open. It fails with ValueError when no trace runs
// or path cannot be written.
func (s *Session) TraceStop(path string) error {
	return s.withPath(path, func(p *C.dvm_session, c *C.char) C.dvm_status {
		return C.dvm_session_trace_stop(p, c)
	})
}

// TraceDump writes the flight recorder to the file path, in the format of a trace: the last
// 1024 events of every worker, kept at all times, with no trace running.
func (s *Session) TraceDump(path string) error {
	return s.withPath(path, func(p *C.dvm_session, c *C.char) C.dvm_status {
		return C.dvm_session_trace_dump(p, c)
	})
}

// withPath runs call with the session and path as a C string.
func (s *Session) withPath(path string, call func(*C.dvm_session, *C.char) C.dvm_status) error {
	cPath := C.CString(path)
	defer C.free(unsafe.Pointer(cPath))
	return s.status(func(p *C.dvm_session) C.dvm_status { return call(p, cPath) })
}
