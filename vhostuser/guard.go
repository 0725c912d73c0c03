//go:build linux

package vhostuser

import "runtime/debug"

// Guest memory is a shared mapping of the front-end's files, and the
// front-end can shrink a file under it at any time (ftruncate): touching
// a page past the new end raises SIGBUS, which would take the whole
// switch down. So every access to guest memory, on a worker or on the
// control goroutine, runs with debug.SetPanicOnFault, which turns the
// fault into a panic of the goroutine that touched the page, and
// recovers from it. The data path's bursts guard themselves (Receive,
// Transmit, to free what the burst held); everything else goes through
// guarded.

// guestFault reports whether x, recovered from a panic, is a memory
// fault (a runtime.Error with the faulting address): any other panic is
// a bug, not the guest's doing, and the caller panics again.
func guestFault(x any) bool {
	_, fault := x.(interface{ Addr() uintptr })
	return fault
}

// guarded runs f, which touches guest memory, and reports whether it
// faulted. f must leave nothing half done that matters after a fault:
// the caller gives up the ring or the front-end. It allocates nothing
// when f's closure does not escape.
func guarded(f func()) (faulted bool) {
	defer func() {
		if x := recover(); x != nil {
			if !guestFault(x) {
				panic(x)
			}
			faulted = true
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	f()
	return false
}
