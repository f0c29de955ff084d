// A session of four worker threads driven from Go: a Go function runs on every worker, its
// results come back as Go values, a failure comes back as an error, and a tensor crosses to
// worker 0 and back after an allreduce.
//
//	cd bindings/go && go run ./example
package main

import (
	"errors"
	"fmt"
	"log"

	"discovm"
)

func main() {
	// Step 1: a Go function, registered under a name the workers find.
	err := discovm.RegisterGlobal("example.scale", func(args ...any) (any, error) {
		x, ok := args[0].(int64)
		if !ok {
			return nil, fmt.Errorf("example.scale wants an int, got %T: %w", args[0], discovm.TypeError)
		}
		return x * int64(discovm.CurrentWorkerID()+1), nil
	})
	check(err)

	// Step 2: four worker threads; Close shuts them down.
	session, err := discovm.NewThreadedSession(4, 1, nil)
	check(err)
	defer session.Close()

	// Step 3: one call reaches every worker; each keeps its result.
	scale, err := session.GetGlobalFunc("example.scale")
	check(err)
	defer scale.Close()
	result, err := session.Call(scale, 10)
	check(err)
	defer result.Close()
	for w := 0; w < session.NumWorkers(); w++ {
		v, err := result.Get(w)
		check(err)
		fmt.Printf("example.scale(10) on worker %d = %v\n", w, v)
	}

	// Step 4: a failure on the workers is an error of the next wait, with its kind.
	bad, err := session.Call(scale, "ten")
	check(err)
	bad.Close()
	if err := session.SyncAll(); errors.Is(err, discovm.WorkerError) {
		fmt.Println("as expected:", err)
	}

	// Step 5: collectives between the workers, and copies to and from worker 0.
	check(session.InitCCL("cpu"))
	shape := discovm.Shape{2, 3}
	x, err := session.Empty(shape, discovm.Float32, false)
	check(err)
	defer x.Close()
	check(session.CopyToWorker0([]float32{1, 2, 3, 4, 5, 6}, shape, x))
	check(session.BroadcastFromWorker0(x, x, false))
	check(session.AllReduce(x, x, discovm.Sum, false))
	out := make([]float32, 6)
	check(session.CopyFromWorker0(out, shape, x))
	fmt.Println("broadcast, then summed over 4 workers:", out)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
