// Package knob holds the mechanisms softnet's lab and benchmarks turn
// off to measure what each is worth. A public Config with such a
// mechanism carries it in a Knobs field of a type from here: only
// softnet's own packages can import this package, and the types' fields
// are unexported, so only they can make a value other than the zero one,
// which is what every user gets. The compiler checks every use: a knob
// is a value of its Config's own type.
package knob

// Pool is how a buffer pool (buffer.Config.Knobs) differs from the one
// every user gets.
type Pool struct {
	uncached bool
}

// PoolUncached makes every get and local free of a pool go to the shared
// depot, one buffer and one lock at a time, as allocators did before
// per-CPU caches: the baseline that shows what the caches are worth.
// Remote frees still defer.
func PoolUncached() Pool { return Pool{uncached: true} }

// Uncached reports whether p is PoolUncached.
func (p Pool) Uncached() bool { return p.uncached }

// TUN is how a TUN/TAP device (tun.Config.Knobs) differs from the one
// every user gets.
type TUN struct {
	singleGets bool
}

// TUNSingleGets makes a device take each receive buffer with its own
// Cache.Get instead of one GetBulk per burst.
func TUNSingleGets() TUN { return TUN{singleGets: true} }

// SingleGets reports whether t is TUNSingleGets.
func (t TUN) SingleGets() bool { return t.singleGets }
