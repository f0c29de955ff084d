package discovm

// #include "shim.h"
import "C"

import "encoding/json"

// Status is what every worker of a session is doing, as Session.Status read it.
type Status struct {
	Workers []WorkerStatus `json:"workers"`
	// CallsSent is how many calls the session has sent: calls are numbered from 1 in the
	// order they were sent, so it is also the number of the last one.
	CallsSent uint64 `json:"calls_sent"`
}

// WorkerStatus is what one worker is doing. A field the worker has not reported is its zero
// value: a worker that has run no call yet has Call 0.
type WorkerStatus struct {
	Worker int `json:"worker"`
	// Node is the machine the worker runs on (0: this one).
	Node int `json:"node"`
	// PID is the worker's process: this process for worker threads.
	PID int `json:"pid"`
	// State is "idle", "running", "collective", "syncing", "dead", "lost" or "unknown".
	State string `json:"state"`
	// Call is the number of the call the worker runs, or ran last.
	Call uint64 `json:"call"`
	// Function is the name of that call's function ("" when it has none).
	Function string `json:"function"`
	// SinceMs is how long the worker has been in its state, in milliseconds.
	SinceMs float64 `json:"since_ms"`
	// Collective is the collective the worker waits in (State "collective").
	Collective string `json:"collective"`
	// WaitsFor are the workers it waits for in that collective.
	WaitsFor []int `json:"waits_for"`
	// LastFinishedCall is the last call the worker finished.
	LastFinishedCall uint64 `json:"last_finished_call"`
	// LastFailure is the last call that failed on the worker (nil: none did).
	LastFailure *CallFailure `json:"last_failure"`
	// Cause says why a dead or lost worker is so.
	Cause string `json:"cause"`
	// LastEvents are the worker's last events, oldest first (nil for a worker on another
	// machine: TraceDump asks its node for them).
	LastEvents []Event `json:"last_events"`
}

// Event is one event of a worker's flight recorder, as the status shows it.
type Event struct {
	// Name is the function's, the collective's, the stream instruction's or the module's.
	Name string `json:"name"`
	// Cat is "call", "sync", "collective", "module" or "stream".
	Cat string `json:"cat"`
	// Call is the call the event belongs to (0: none).
	Call uint64 `json:"call"`
	// BeganMsAgo is how long ago it began, in milliseconds.
	BeganMsAgo float64 `json:"began_ms_ago"`
	// DurMs is how long it took, in milliseconds.
	DurMs float64 `json:"dur_ms"`
}

// CallFailure is a call that failed on a worker, and its error.
type CallFailure struct {
	Call  uint64 `json:"call"`
	Error string `json:"error"`
}

// Status says what every worker is doing now, read without sending any worker a message: a
// worker stuck in a function, or dead, is reported as it is. It fails with SessionClosed
// after Shutdown.
func (s *Session) Status() (Status, error) {
	var v value
	if err := s.status(func(p *C.dvm_session) C.dvm_status { return C.dvm_session_status(p, v.c()) }); err != nil {
		return Status{}, err
	}
	got, err := goValue(v)
	if err != nil {
		return Status{}, err
	}
	text, ok := got.(string)
	if !ok {
		return Status{}, errorf(TypeError, "the session's status came back as a %T, not a string", got)
	}
	var st Status
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		return Status{}, errorf(RuntimeError, "the session's status is not the JSON document it should be: %v", err)
	}
	return st, nil
}
