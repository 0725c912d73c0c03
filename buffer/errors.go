package buffer

import "errors"

var (
	// ErrExhausted means no free buffer of the class was available in the
	// cache, its inbound list or the depot. Callers drop the packet with
	// drop.NoMem; the pool never blocks or grows.
	ErrExhausted = errors.New("buffer: pool exhausted")
	// ErrClass means the class is not one of the pool's classes.
	ErrClass = errors.New("buffer: no such size class")
	// ErrTooManyCaches means the pool already has Config.MaxCaches caches.
	ErrTooManyCaches = errors.New("buffer: too many caches")
	// ErrBadBuild means Build was given a buffer id or a data window that
	// does not describe a frame this cache holds.
	ErrBadBuild = errors.New("buffer: invalid build")
)
