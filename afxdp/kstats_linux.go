package afxdp

import "softnet.dev/drop"

// kernelCounts is what the kernel counted for the port: the program's
// counters and the sockets' XDP_STATISTICS.
type kernelCounts struct {
	progDrop, progPass uint64
	rxDropped          uint64 // frames the socket code dropped: too long, or no fill frame
	fillEmpty          uint64 // times the fill ring had no frame for a frame
	rxRingFull         uint64
	err                error
}

// kernelCounts reads the kernel's counters (system calls: Stats' work,
// never the datapath's). Once the port is closed they are those read at
// close.
func (p *Port) kernelCounts() kernelCounts {
	if p.final != nil {
		return *p.final
	}
	var k kernelCounts
	k.progDrop, k.progPass, k.err = p.prog.counted()
	for _, s := range p.socks {
		st, err := s.stats()
		if err != nil {
			k.err = err
			continue
		}
		k.rxDropped += st.Rx_dropped
		k.fillEmpty += st.Rx_fill_ring_empty_descs
		k.rxRingFull += st.Rx_ring_full
	}
	return k
}

// Stats returns the port's counters, summed over its queues, with the
// kernel's losses among the receive drops. It reads the kernel's
// counters with a few system calls.
func (p *Port) Stats() Stats {
	var qs []*counters
	for _, q := range p.rx {
		qs = append(qs, &q.ctr)
	}
	for _, q := range p.tx {
		qs = append(qs, &q.ctr)
	}
	s := statsOf(qs)
	p.closeMu.Lock()
	k := p.kernelCounts()
	p.closeMu.Unlock()
	s.RxDrops[drop.XDP] += k.progDrop
	s.XDPPass = k.progPass
	s.RxDrops[drop.NoMem] += k.fillEmpty
	s.RxDrops[drop.FullRing] += k.rxRingFull
	// The socket code counts a frame it had no fill frame for both as
	// dropped and as a fill-ring miss; the rest it dropped were longer
	// than a UMEM frame (without multi-buffer) or, with it, found too
	// few fill frames for all their pieces.
	if rest := k.rxDropped - min(k.rxDropped, k.fillEmpty); rest > 0 {
		if p.sg {
			s.RxDrops[drop.NoMem] += rest
		} else {
			s.RxDrops[drop.PktTooBig] += rest
		}
	}
	return s
}
