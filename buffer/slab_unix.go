//go:build unix

package buffer

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mapSlab returns n bytes of anonymous memory outside the Go heap, on a
// page boundary. The
// kernel backs it lazily, so a large pool costs resident memory only for
// the frames that have been touched.
func mapSlab(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("buffer: mmap %d bytes: %w", n, err)
	}
	return b, nil
}

func unmapSlab(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("buffer: munmap %d bytes: %w", len(b), err)
	}
	return nil
}
