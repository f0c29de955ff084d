package discovm_test

import (
	"reflect"
	"testing"

	"discovm"
)

// checkCollectives runs copies and collectives on a session of n CPU workers.
func checkCollectives(t *testing.T, s *discovm.Session, n int) {
	t.Helper()
	ok(t, s.InitCCL("cpu"))
	shape := discovm.Shape{2, 2}
	x := must(s.Empty(shape, discovm.Float32, false))
	defer x.Close()
	sum := must(s.Empty(shape, discovm.Float32, false))
	defer sum.Close()
	ok(t, s.CopyToWorker0([]float32{1, 2, 3, 4}, shape, x))
	ok(t, s.BroadcastFromWorker0(x, x, false))
	ok(t, s.AllReduce(x, sum, discovm.Sum, false))
	ok(t, s.Barrier())
	ok(t, s.SyncAll())
	got := make([]float32, 4)
	ok(t, s.CopyFromWorker0(got, shape, sum))
	k := float32(n)
	if want := []float32{k, 2 * k, 3 * k, 4 * k}; !reflect.DeepEqual(got, want) {
		t.Errorf("allreduce of the broadcast: %v, want %v", got, want)
	}

	all := must(s.Empty(discovm.Shape{int64(n), 2, 2}, discovm.Float32, false))
	defer all.Close()
	ok(t, s.AllGather(sum, all, false))
	gathered := make([]float32, 4*n)
	ok(t, s.CopyFromWorker0(gathered, discovm.Shape{int64(n), 2, 2}, all))
	if gathered[4*n-1] != 4*k {
		t.Errorf("allgather: %v", gathered)
	}
	tensor := must(sum.Get(n - 1)).(*discovm.Tensor)
	defer tensor.Close()
	if !reflect.DeepEqual(tensor.Shape(), shape) {
		t.Errorf("the tensor read back has the shape %v", tensor.Shape())
	}

	err := s.CopyToWorker0([]float32{1, 2, 3}, shape, x)
	expectKind(t, err, discovm.ValueError, "3 elements")
	err = s.CopyToWorker0([]string{"no"}, discovm.Shape{1}, x)
	expectKind(t, err, discovm.TypeError, "[]string")
}

func TestCopiesAndCollectivesBetweenThreads(t *testing.T) {
	checkCollectives(t, threaded(t, 4), 4)
}
