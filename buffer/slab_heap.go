package buffer

import "unsafe"

// heapSlab returns n bytes from the Go heap, starting on a cache line as
// frames must. It is the slab where there is no mmap (see slab_other.go):
// the frames are still out of the collector's way, since a []byte holds no
// pointers to scan, but the whole slab is resident from the start.
func heapSlab(n int) []byte {
	b := make([]byte, n+frameAlign)
	skip := (frameAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%frameAlign)) % frameAlign
	return b[skip : skip+n : skip+n]
}
