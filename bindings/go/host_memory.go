package discovm

import "unsafe"

// memory is the memory of a numeric Go slice, for copies to and from the library.
type memory struct {
	data   unsafe.Pointer // nil for an empty slice
	length int            // elements
	bytes  int
	dtype  DataType
}

// hostMemory is the memory of a slice of a numeric type; another value is a TypeError.
func hostMemory(slice any) (memory, error) {
	switch s := slice.(type) {
	case []int8:
		return sliceMemory(s, Int8), nil
	case []int16:
		return sliceMemory(s, Int16), nil
	case []int32:
		return sliceMemory(s, Int32), nil
	case []int64:
		return sliceMemory(s, Int64), nil
	case []uint8:
		return sliceMemory(s, Uint8), nil
	case []uint16:
		return sliceMemory(s, Uint16), nil
	case []uint32:
		return sliceMemory(s, Uint32), nil
	case []uint64:
		return sliceMemory(s, Uint64), nil
	case []float32:
		return sliceMemory(s, Float32), nil
	case []float64:
		return sliceMemory(s, Float64), nil
	}
	return memory{}, errorf(TypeError, "host memory must be a slice of a numeric type, not %T", slice)
}

func sliceMemory[T any](s []T, dtype DataType) memory {
	m := memory{length: len(s), bytes: len(s) * int(dtype.Bits/8), dtype: dtype}
	if len(s) > 0 {
		m.data = unsafe.Pointer(&s[0])
	}
	return m
}

// elements is the number of elements of a tensor of this shape.
func (s Shape) elements() int {
	n := 1
	for _, d := range s {
		n *= int(d)
	}
	return n
}
