//go:build !unix

package buffer

func mapSlab(n int) ([]byte, error) { return heapSlab(n), nil }

// unmapSlab leaves the slab to the garbage collector.
func unmapSlab([]byte) error { return nil }
