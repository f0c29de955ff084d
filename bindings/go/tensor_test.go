package discovm_test

import (
	"reflect"
	"testing"

	"discovm"
)

func TestTensorsAndStreams(t *testing.T) {
	a := must(discovm.NewTensor(discovm.Shape{2, 3}, discovm.Float64, discovm.HostCPU))
	defer a.Close()
	b := must(discovm.NewTensor(discovm.Shape{2, 3}, discovm.Float64, discovm.HostCPU))
	defer b.Close()
	if !reflect.DeepEqual(a.Shape(), discovm.Shape{2, 3}) || a.DataType() != discovm.Float64 || a.Device() != discovm.HostCPU {
		t.Fatalf("tensor %v %v %v", a.Shape(), a.DataType(), a.Device())
	}
	ok(t, a.Write([]float64{1, 2, 3, 4, 5, 6}))
	first, second := must(discovm.NewStream(discovm.HostCPU)), must(discovm.NewStream(discovm.HostCPU))
	defer first.Close()
	defer second.Close()
	ok(t, first.Copy(b, a))
	ok(t, second.Wait(first))
	ok(t, second.Sync())
	got := make([]float64, 6)
	ok(t, b.Read(got))
	if !reflect.DeepEqual(got, []float64{1, 2, 3, 4, 5, 6}) {
		t.Errorf("read %v", got)
	}
	head := make([]float64, 1)
	ok(t, b.Read(head))
	if head[0] != 1 {
		t.Errorf("first element %v", head[0])
	}

	expectKind(t, b.Read(make([]float64, 7)), discovm.ValueError, "56")
	expectKind(t, b.Read([]string{}), discovm.TypeError, "numeric")
	_, err := discovm.NewTensor(discovm.Shape{-1}, discovm.Float32, discovm.HostCPU)
	expectKind(t, err, discovm.ValueError, "-1")
	_, err = discovm.NewStream(discovm.Device{Type: 99})
	if err == nil {
		t.Error("a stream on device type 99")
	}
	if n := must(discovm.DeviceCount(discovm.CPU)); n != 1 {
		t.Errorf("%d CPUs", n)
	}
	if discovm.Version() == "" {
		t.Error("no version")
	}
	b.Close()
	expectKind(t, b.Read(head), discovm.ValueError, "the tensor is closed")
}

func TestTensorsCrossAsArguments(t *testing.T) {
	name := register(t, func(args ...any) (any, error) {
		in := args[0].(*discovm.Tensor)
		defer in.Close()
		out, err := discovm.NewTensor(in.Shape(), discovm.Int32, discovm.HostCPU)
		if err != nil {
			return nil, err
		}
		v := make([]int32, 2)
		if err := in.Read(v); err != nil {
			return nil, err
		}
		return out, out.Write([]int32{v[0] * 10, v[1] * int32(discovm.CurrentWorkerID())})
	})
	s := threaded(t, 2)
	fn := must(s.GetGlobalFunc(name))
	defer fn.Close()
	in := must(discovm.NewTensor(discovm.Shape{2}, discovm.Int32, discovm.HostCPU))
	defer in.Close()
	ok(t, in.Write([]int32{3, 4}))
	out := must(s.Call(fn, in))
	defer out.Close()
	tensor := must(out.Get(1)).(*discovm.Tensor)
	defer tensor.Close()
	got := make([]int32, 2)
	ok(t, tensor.Read(got))
	if !reflect.DeepEqual(got, []int32{30, 4}) {
		t.Errorf("got %v", got)
	}
	names := must(discovm.GlobalNames())
	found := false
	for _, n := range names {
		found = found || n == name
	}
	if !found {
		t.Errorf("%s is not among the global names", name)
	}
}
