package discovm_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"discovm"
)

// must is v, for a call that must succeed (a test that fails here panics with the error).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var registered = 0

// register registers fn under a name of its own, removed when the test ends.
func register(t *testing.T, fn discovm.GoFunc) string {
	t.Helper()
	registered++
	name := fmt.Sprintf("go_test.%s.%d", t.Name(), registered)
	ok(t, discovm.RegisterGlobal(name, fn))
	t.Cleanup(func() { ok(t, discovm.RemoveGlobal(name)) })
	return name
}

func threaded(t *testing.T, n int) *discovm.Session {
	t.Helper()
	s := must(discovm.NewThreadedSession(n, 1, &discovm.Options{Timeout: time.Minute}))
	t.Cleanup(func() { ok(t, s.Close()) })
	return s
}

// expectKind fails unless err is a library error of kind whose message contains text.
func expectKind(t *testing.T, err error, kind discovm.Kind, text string) {
	t.Helper()
	var e *discovm.Error
	if !errors.Is(err, kind) || !errors.As(err, &e) || !strings.Contains(e.Message, text) {
		t.Fatalf("expected a %s mentioning %q, got %v", kind, text, err)
	}
}

func TestGoFunctionsRunOnEveryWorkerThread(t *testing.T) {
	name := register(t, func(args ...any) (any, error) {
		return args[0].(int64) * int64(discovm.CurrentWorkerID()+1), nil
	})
	s := threaded(t, 4)
	fn := must(s.GetGlobalFunc(name))
	defer fn.Close()
	out := must(s.Call(fn, 10))
	defer out.Close()
	ok(t, s.SyncAll())
	for w := 0; w < 4; w++ {
		if got := must(out.Get(w)); got != int64(10*(w+1)) {
			t.Errorf("worker %d: got %v", w, got)
		}
	}
	if discovm.CurrentWorkerID() != -1 {
		t.Error("the test's goroutine is no worker")
	}
}

func TestValuesCrossBothWays(t *testing.T) {
	name := register(t, func(args ...any) (any, error) { return args[0], nil })
	s := threaded(t, 2)
	fn := must(s.GetGlobalFunc(name))
	defer fn.Close()
	long := strings.Repeat("a longer string ", 4)
	for _, v := range []any{
		nil, true, int64(-7), 2.5, "short", long, []byte{1, 2, 3}, []byte(long),
		discovm.Shape{2, 3}, discovm.Float32, discovm.HostCPU,
	} {
		out := must(s.Call(fn, v))
		got := must(out.Get(1))
		if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", v) {
			t.Errorf("%#v came back as %#v", v, got)
		}
		out.Close()
	}
	if got := must(s.Call(fn, int32(5))); must(got.Get(0)) != int64(5) {
		t.Error("an int32 comes back as an int64")
	}
	_, err := s.Call(fn, struct{}{})
	expectKind(t, err, discovm.TypeError, "argument 0: a Go struct {} cannot be passed")
}

func TestDRefsAsArgumentsAndSet(t *testing.T) {
	name := register(t, func(args ...any) (any, error) { return args[0].(int64) + 1, nil })
	s := threaded(t, 3)
	fn := must(s.GetGlobalFunc(name))
	defer fn.Close()
	id := must(s.GetGlobalFunc("runtime.disco.worker_rank"))
	defer id.Close()
	ids := must(s.Call(id))
	defer ids.Close()
	next := must(s.Call(fn, ids))
	defer next.Close()
	for w := 0; w < 3; w++ {
		if got := must(next.Get(w)); got != int64(w+1) {
			t.Errorf("worker %d: got %v", w, got)
		}
	}
	ok(t, next.Set(2, "set"))
	if got := must(next.Get(2)); got != "set" {
		t.Errorf("after Set: %v", got)
	}
	_, err := next.Get(3)
	expectKind(t, err, discovm.IndexError, "3")
}

func TestErrorsCarryTheirKind(t *testing.T) {
	s := threaded(t, 2)
	_, err := s.GetGlobalFunc("go_test.missing")
	expectKind(t, err, discovm.KeyError, "go_test.missing")
	var e *discovm.Error
	if !errors.As(err, &e) || e.Status != 4 {
		t.Errorf("a KeyError has status 4: %#v", e)
	}

	failing := register(t, func(args ...any) (any, error) {
		if discovm.CurrentWorkerID() == 1 {
			return nil, fmt.Errorf("no luck on worker %d", discovm.CurrentWorkerID())
		}
		return nil, nil
	})
	fn := must(s.GetGlobalFunc(failing))
	defer fn.Close()
	must(s.Call(fn)).Close()
	ok(t, s.SyncWorker(0))
	expectKind(t, s.SyncAll(), discovm.WorkerError, "no luck on worker 1")
	ok(t, s.SyncAll()) // reported once; the session goes on
}

func TestKindsAndPanicsOfGoFunctions(t *testing.T) {
	kind := register(t, func(args ...any) (any, error) {
		return nil, fmt.Errorf("wrapped: %w", discovm.IndexError)
	})
	f := must(discovm.GetGlobal(kind))
	defer f.Close()
	_, err := f.Call()
	expectKind(t, err, discovm.IndexError, "wrapped: IndexError")

	panics := register(t, func(args ...any) (any, error) { panic("boom") })
	s := threaded(t, 2)
	fn := must(s.GetGlobalFunc(panics))
	defer fn.Close()
	must(s.Call(fn)).Close()
	expectKind(t, s.SyncAll(), discovm.WorkerError, "the Go function panicked: boom")
}

func TestWorkerHandles(t *testing.T) {
	s := threaded(t, 3)
	id := must(s.GetGlobalFunc("runtime.disco.worker_rank"))
	defer id.Close()
	w := must(s.Worker(2))
	defer w.Close()
	if w.ID() != 2 {
		t.Errorf("worker id %d", w.ID())
	}
	if d := must(w.Device()); d != discovm.HostCPU {
		t.Errorf("device %v", d)
	}
	out := must(w.Call(id))
	defer out.Close()
	ok(t, w.Sync())
	if got := must(out.Get(2)); got != int64(2) {
		t.Errorf("got %v", got)
	}
	_, err := s.Worker(3)
	expectKind(t, err, discovm.IndexError, "3")
}

func TestStatusOfIdleWorkers(t *testing.T) {
	name := register(t, func(args ...any) (any, error) { return args[0], nil })
	s := threaded(t, 3)
	fn := must(s.GetGlobalFunc(name)) // a lookup is no call
	defer fn.Close()
	first := must(s.Call(fn, 1))
	defer first.Close()
	second := must(s.Call(fn, 2))
	defer second.Close()
	ok(t, s.SyncAll())
	status := must(s.Status())
	if status.CallsSent != 2 || len(status.Workers) != 3 {
		t.Fatalf("%d calls sent, %d workers: %+v", status.CallsSent, len(status.Workers), status)
	}
	for w, seen := range status.Workers {
		if seen.Worker != w || seen.Node != 0 || seen.PID != os.Getpid() || seen.State != "idle" {
			t.Errorf("worker %d: %+v", w, seen)
		}
		if seen.Call != 2 || seen.LastFinishedCall != 2 || seen.Function != name {
			t.Errorf("worker %d ran call %d (%q), finished %d", w, seen.Call, seen.Function, seen.LastFinishedCall)
		}
		if seen.SinceMs < 0 || len(seen.WaitsFor) != 0 || seen.LastFailure != nil || seen.Cause != "" {
			t.Errorf("worker %d: %+v", w, seen)
		}
		// The flight recorder's last events end with the second call.
		last := seen.LastEvents[len(seen.LastEvents)-1]
		if last.Cat != "call" || last.Call != 2 || last.Name != name || last.DurMs < 0 || last.BeganMsAgo < last.DurMs {
			t.Errorf("worker %d's last event: %+v", w, last)
		}
	}
	ok(t, s.Shutdown())
	_, err := s.Status()
	expectKind(t, err, discovm.SessionClosed, "")
}

func TestATraceAndADumpAreWritten(t *testing.T) {
	s := threaded(t, 2)
	rank := must(s.GetGlobalFunc("runtime.disco.worker_rank"))
	defer rank.Close()
	dir := t.TempDir()
	ok(t, s.TraceStart())
	expectKind(t, s.TraceStart(), discovm.ValueError, "runs already")
	got := must(s.Call(rank))
	defer got.Close()
	ok(t, s.SyncAll())
	ok(t, s.TraceStop(filepath.Join(dir, "trace.json")))
	ok(t, s.TraceDump(filepath.Join(dir, "dump.json")))
	for _, name := range []string{"trace.json", "dump.json"} {
		var trace struct {
			TraceEvents []struct {
				Ph   string         `json:"ph"`
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"traceEvents"`
		}
		text := must(os.ReadFile(filepath.Join(dir, name)))
		ok(t, json.Unmarshal(text, &trace))
		runs := 0
		for _, e := range trace.TraceEvents {
			if e.Ph == "X" && e.Name == "runtime.disco.worker_rank" {
				runs++
			}
		}
		if runs != 2 {
			t.Errorf("%s: %d runs of the call, not one per worker", name, runs)
		}
	}
	expectKind(t, s.TraceStop(filepath.Join(dir, "again.json")), discovm.ValueError, "no trace")
	expectKind(t, s.TraceDump(filepath.Join(dir, "missing", "d.json")), discovm.ValueError, "cannot write")
}

func TestShutdownClosesTheSession(t *testing.T) {
	s := must(discovm.NewThreadedSession(2, 1, nil))
	ok(t, s.Shutdown())
	_, err := s.GetGlobalFunc("runtime.disco.worker_rank")
	expectKind(t, err, discovm.SessionClosed, "")
	ok(t, s.Close())
	ok(t, s.Close())
	expectKind(t, s.SyncAll(), discovm.ValueError, "the session is closed")
	_, err = discovm.NewThreadedSession(0, 1, nil)
	expectKind(t, err, discovm.ValueError, "0")
}

func TestRegistersAreFreedByCloseAndByFinalizers(t *testing.T) {
	s := threaded(t, 2)
	id := must(s.GetGlobalFunc("runtime.disco.worker_rank"))
	for i := 0; i < 100; i++ {
		must(s.Call(id)) // dropped without Close: the finalizers free them
	}
	id.Close()
	for i := 0; ; i++ {
		collectGarbage()
		if n := must(s.LiveRegisters(0)); n == 0 {
			break
		} else if i == 100 {
			t.Fatalf("%d registers still live", n)
		}
	}
}

func TestCallsFromManyGoroutines(t *testing.T) {
	name := register(t, func(args ...any) (any, error) { return args[0], nil })
	s := threaded(t, 2)
	fn := must(s.GetGlobalFunc(name))
	defer fn.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				out, err := s.Call(fn, fmt.Sprintf("goroutine %d call %d", g, i))
				if err != nil {
					t.Error(err)
					return
				}
				if got, err := out.Get(1); err != nil || got != fmt.Sprintf("goroutine %d call %d", g, i) {
					t.Errorf("got %v, %v", got, err)
				}
				out.Close()
			}
		}(g)
	}
	wg.Wait()
}

// collectGarbage collects garbage and gives the finalizers a moment to run.
func collectGarbage() {
	runtime.GC()
	time.Sleep(time.Millisecond)
}
