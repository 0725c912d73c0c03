package endpoint

import "softnet.dev/drop"

// Stats count an endpoint's (or a table's) buffers through the lending
// cycle. Once every view is released or the endpoint closed,
// Lent == Refilled + Reclaimed: every lent buffer came home through a
// refill ring or at close, and none was freed elsewhere.
type Stats struct {
	Lent        uint64      `json:"lent"`         // views put into receive rings by workers
	Received    uint64      `json:"received"`     // views taken by the application
	Released    uint64      `json:"released"`     // views the application released
	Refilled    uint64      `json:"refilled"`     // released buffers workers freed from refill rings
	Reclaimed   uint64      `json:"reclaimed"`    // lent buffers workers freed after Close
	BadReleases uint64      `json:"bad_releases"` // releases refused on the application side
	Rejected    uint64      `json:"rejected"`     // tokens a worker refused (never freed)
	Sent        uint64      `json:"sent"`         // packets sent
	SendBufs    uint64      `json:"send_bufs"`    // send buffers stocked by workers
	RingFull    uint64      `json:"ring_full"`    // drops: a receive ring was full
	QuotaFull   uint64      `json:"quota_full"`   // drops: the endpoint held its quota
	Closed      uint64      `json:"closed"`       // drops: delivered after Close
	Drops       drop.Counts `json:"drops"`        // the drops by reason
}

// Outstanding returns the views lent and not yet back.
func (s *Stats) Outstanding() uint64 { return s.Lent - s.Refilled - s.Reclaimed }

func (s *Stats) add(o *Stats) {
	s.Lent += o.Lent
	s.Received += o.Received
	s.Released += o.Released
	s.Refilled += o.Refilled
	s.Reclaimed += o.Reclaimed
	s.BadReleases += o.BadReleases
	s.Rejected += o.Rejected
	s.Sent += o.Sent
	s.SendBufs += o.SendBufs
	s.RingFull += o.RingFull
	s.QuotaFull += o.QuotaFull
	s.Closed += o.Closed
	s.Drops.Add(&o.Drops)
}

// Stats returns the endpoint's counters; safe from any goroutine.
func (e *Endpoint) Stats() Stats {
	var s Stats
	for _, l := range e.lanes {
		c := &l.ctr
		s.Lent += c.lent.Load()
		s.Refilled += c.refilled.Load()
		s.Reclaimed += c.reclaimed.Load()
		s.Rejected += c.rejected.Load()
		s.RingFull += c.ringFull.Load()
		s.QuotaFull += c.quotaFull.Load()
		s.Closed += c.closedDrops.Load()
		s.Sent += c.sent.Load()
		s.SendBufs += c.sendBufs.Load()
	}
	e.mu.Lock()
	s.Received, s.Released, s.BadReleases = e.received, e.released, e.badRel
	e.mu.Unlock()
	s.Drops[drop.SocketRcvBuff] = s.RingFull + s.QuotaFull
	s.Drops[drop.NoRoute] = s.Closed
	return s
}

// Stats returns the sum over every endpoint the table has had.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	s := t.gone
	eps := *t.eps.Load()
	t.mu.Unlock()
	for _, e := range eps {
		es := e.Stats()
		s.add(&es)
	}
	return s
}
