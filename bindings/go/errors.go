package discovm

// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
)

// Kind is the kind of a library error, as the C API names it (tvm-ffi's names, and the
// library's own). A Kind is an error itself, so errors.Is(err, discovm.KeyError) asks for
// the kind of err.
type Kind string

// The kinds the C API reports by status code. Errors a function raises can carry other
// kinds (OtherError's code, with the kind by name).
const (
	ValueError        Kind = "ValueError"
	TypeError         Kind = "TypeError"
	IndexError        Kind = "IndexError"
	KeyError          Kind = "KeyError"
	RuntimeError      Kind = "RuntimeError"
	WorkerError       Kind = "WorkerError"
	SessionClosed     Kind = "SessionClosed"
	DeviceUnavailable Kind = "DeviceUnavailable"
	TimeoutError      Kind = "TimeoutError"
	Panic             Kind = "Panic"
)

// statusKinds maps the C API's status codes (DVM_VALUE_ERROR, ...) to their kinds; a code
// is never renumbered. DVM_OTHER_ERROR (11) has no kind of its own.
var statusKinds = map[int]Kind{
	1: ValueError, 2: TypeError, 3: IndexError, 4: KeyError, 5: RuntimeError,
	6: WorkerError, 7: SessionClosed, 8: DeviceUnavailable, 9: TimeoutError, 10: Panic,
}

func (k Kind) Error() string { return string(k) }

// Error is a failure the library reported: its kind, status code and message.
type Error struct {
	Kind    Kind
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Kind, e.Message) }

// Is reports whether target is e's kind, or an *Error of the same kind.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Kind:
		return t == e.Kind
	case *Error:
		return t.Kind == e.Kind
	}
	return false
}

// errorf makes an error of the binding's own, in the library's terms.
func errorf(kind Kind, format string, args ...any) error {
	status := 11
	for code, k := range statusKinds {
		if k == kind {
			status = code
		}
	}
	return &Error{Kind: kind, Status: status, Message: fmt.Sprintf(format, args...)}
}

// lastError reads the error the failed call left on this OS thread; the caller holds the
// thread (runtime.LockOSThread) since the call.
func lastError(status C.dvm_status) error {
	kind := C.dvm_last_error_kind()
	message := C.dvm_last_error_message()
	e := &Error{Kind: Kind(statusKinds[int(status)]), Status: int(status)}
	if kind != nil {
		e.Kind = Kind(C.GoString(kind))
	}
	if message != nil {
		e.Message = C.GoString(message)
	}
	return e
}

// check runs one C call on one OS thread and returns the error it reported, if any.
func check(call func() C.dvm_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if status := call(); status != C.DVM_OK {
		return lastError(status)
	}
	return nil
}
