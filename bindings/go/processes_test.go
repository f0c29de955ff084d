package discovm_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"discovm"
)

// library is the path of libdiscovm.so ($DISCOVM_LIBRARY): a module every worker can load,
// next to the worker and node programs.
func library(t *testing.T) string {
	t.Helper()
	path := os.Getenv("DISCOVM_LIBRARY")
	if path == "" {
		t.Skip("DISCOVM_LIBRARY (the path of libdiscovm.so, with discovm-worker and discovm-node next to it) is not set")
	}
	return path
}

// checkWorkers runs built-ins and a module's function on a session of worker processes.
func checkWorkers(t *testing.T, s *discovm.Session, n int) {
	t.Helper()
	if s.NumWorkers() != n {
		t.Fatalf("%d workers", s.NumWorkers())
	}
	rank := must(s.GetGlobalFunc("runtime.disco.worker_rank"))
	defer rank.Close()
	ranks := must(s.Call(rank))
	defer ranks.Close()
	for w := 0; w < n; w++ {
		if got := must(ranks.Get(w)); got != int64(w) {
			t.Errorf("worker %d says it is %v", w, got)
		}
	}
	module := must(s.LoadModule(library(t)))
	defer module.Close()
	version := must(s.ModuleFunc(module, "version"))
	defer version.Close()
	out := must(s.Call(version))
	defer out.Close()
	ok(t, s.SyncAll())
	if got := must(out.Get(n - 1)); got != discovm.Version() {
		t.Errorf("the module's version on worker %d: %v", n-1, got)
	}
	// A function the module lacks fails the lookup itself.
	_, err := s.ModuleFunc(module, "no_such_function")
	expectKind(t, err, discovm.KeyError, "no_such_function")
	ok(t, s.SyncAll())

	fn, err := discovm.NewFunc(func(args ...any) (any, error) { return nil, nil })
	ok(t, err)
	defer fn.Close()
	_, err = s.Call(rank, fn)
	expectKind(t, err, discovm.TypeError, "")
}

func TestProcessSessions(t *testing.T) {
	library(t)
	s := must(discovm.NewProcessSession(2, 1, &discovm.Options{Timeout: time.Minute}))
	defer func() { ok(t, s.Close()) }()
	checkWorkers(t, s, 2)
	checkCollectives(t, s, 2)
	_, err := discovm.NewProcessSession(1, 1, &discovm.Options{WorkerProgram: "/no/such/worker"})
	expectKind(t, err, discovm.ValueError, "/no/such/worker")
}

func TestSocketSessions(t *testing.T) {
	node := filepath.Join(filepath.Dir(library(t)), "discovm-node")
	port := freePort(t)
	const token = "a test secret"
	cmd := exec.Command(node, "127.0.0.1", strconv.Itoa(port), "1")
	cmd.Env = append(os.Environ(), "DISCOVM_SESSION_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	ok(t, cmd.Start())
	s, err := discovm.NewSocketSession(2, 1, 1, "127.0.0.1", port, &discovm.Options{
		Timeout: time.Minute, SessionToken: token, Heartbeat: 5 * time.Second,
	})
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	checkWorkers(t, s, 2)
	ok(t, s.Close())
	if err := cmd.Wait(); err != nil {
		t.Errorf("the node program: %v", err)
	}
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l := must(net.Listen("tcp", "127.0.0.1:0"))
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
