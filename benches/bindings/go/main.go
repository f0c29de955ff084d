// The Go side of the bindings benchmark: the loops of benches/bindings/calls.c through the
// Go package (pipelined calls of runtime.disco.worker_rank, each result closed at once, then
// one sync; and call + sync round trips), printing the same line.
//
// Usage: go run . [PIPELINED_CALLS [ROUND_TRIPS]]
package main

import (
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"discovm"
)

const rounds = 5

func main() {
	pipelined, roundTrips := arg(1, 200000), arg(2, 20000)
	session, err := discovm.NewThreadedSession(1, 1, nil)
	check(err)
	defer session.Close()
	fn, err := session.GetGlobalFunc("runtime.disco.worker_rank")
	check(err)
	defer fn.Close()
	bestPipelined, bestRoundTrip := 1e300, 1e300
	for round := 0; round < rounds; round++ {
		start := time.Now()
		for i := 0; i < pipelined; i++ {
			out, err := session.Call(fn)
			check(err)
			out.Close()
		}
		check(session.SyncAll())
		mid := time.Now()
		for i := 0; i < roundTrips; i++ {
			out, err := session.Call(fn)
			check(err)
			out.Close()
			check(session.SyncAll())
		}
		end := time.Now()
		bestPipelined = min(bestPipelined, float64(mid.Sub(start).Nanoseconds())/float64(pipelined))
		bestRoundTrip = min(bestRoundTrip, float64(end.Sub(mid).Nanoseconds())/float64(roundTrips))
	}
	fmt.Printf("pipelined_ns=%.1f round_trip_ns=%.1f\n", bestPipelined, bestRoundTrip)
}

func min(a, b float64) float64 {
	if a < b {
		return a
	}
	return b
}

func arg(i, fallback int) int {
	if len(os.Args) > i {
		n, err := strconv.Atoi(os.Args[i])
		check(err)
		return n
	}
	return fallback
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
