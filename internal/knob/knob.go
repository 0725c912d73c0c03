// Package knob holds the switches that softnet's benchmarks and lab turn
// to measure what a mechanism is worth, and that are not part of any
// public API: a user gets the mechanisms always on. Each public package
// that has such a switch registers its setter here at init, and the
// bench and lab call it through the typed functions below.
package knob

var (
	poolUncached  any // func(*buffer.Config), set by package buffer
	tunSingleGets any // func(*tun.Config), set by package tun
)

// RegisterPoolUncached is called by package buffer.
func RegisterPoolUncached[C any](f func(*C)) { poolUncached = f }

// PoolUncached makes every get and local free of the pool cfg describes
// go to the shared depot, one buffer and one lock at a time, as
// allocators did before per-CPU caches: the baseline that shows what the
// caches are worth. Remote frees still defer.
func PoolUncached[C any](cfg *C) { poolUncached.(func(*C))(cfg) }

// RegisterTUNSingleGets is called by package tun.
func RegisterTUNSingleGets[C any](f func(*C)) { tunSingleGets = f }

// TUNSingleGets makes the device cfg describes take each receive buffer
// with its own Cache.Get instead of one GetBulk per burst.
func TUNSingleGets[C any](cfg *C) { tunSingleGets.(func(*C))(cfg) }
