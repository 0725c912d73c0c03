package program

// learnBatch is how many new addresses a batch collects before it takes a
// table's writer lock. Each commit copies the table, so a burst of new
// addresses (a subnet coming up, a bridge seeing many stations at once)
// costs one copy per learnBatch addresses rather than one per address.
// Packets later in the same batch do not yet see the collected entries
// and are flooded or routed as before; the next batch sees them.
const learnBatch = 32

// pending collects the addresses a batch learns. It lives on Run's stack,
// so collecting allocates nothing.
type pending[K comparable] struct {
	n    int
	keys [learnBatch]K
}

// add records k, once, and reports whether the collection is now full
// and must be committed.
func (p *pending[K]) add(k K) bool {
	for _, x := range p.keys[:p.n] {
		if x == k {
			return false
		}
	}
	p.keys[p.n] = k
	p.n++
	return p.n == len(p.keys)
}
