package buffer

import (
	"testing"
	"unsafe"
)

func TestHeapSlabIsAlignedAndExact(t *testing.T) {
	for _, n := range []int{64, 4096, 3 * 65600} {
		s := heapSlab(n)
		if len(s) != n || cap(s) != n {
			t.Errorf("heapSlab(%d): len %d cap %d", n, len(s), cap(s))
		}
		if a := uintptr(unsafe.Pointer(unsafe.SliceData(s))) % frameAlign; a != 0 {
			t.Errorf("heapSlab(%d) starts %d bytes past a cache line", n, a)
		}
	}
}
