package lab

import (
	"context"
	"fmt"
)

// pdrRcvBuf is the receiving socket's buffer in a PDR search: large, so
// that a burst does not overflow it while the receiver waits for a CPU
// (iperf3 -w; the built-in receiver's SO_RCVBUF). The kernel caps it at
// net.core.rmem_max.
const pdrRcvBuf = 4 << 20

// pdrTrial is one transfer of a search at an offered rate.
type pdrTrial struct {
	Offered  float64 // payload bits/s asked for; 0 for no limit
	Sent     float64 // payload bits/s the sender sent (received and lost)
	Received float64 // payload bits/s received
	PPS      float64 // datagrams received per second
	LossPct  float64
	Lost     uint64 // datagrams sent and not received
	// Where they were lost, as counted during the trial: the sending
	// guest's device, the datapath's own drops, the receiving socket.
	DevDrops, PathDrops, SockDrops uint64
}

func (t pdrTrial) pass() bool { return t.LossPct <= PDRLossPct }

// offered returns the rate the trial offered: what it asked for, or with
// no limit what the sender managed.
func (t pdrTrial) offered() float64 {
	if t.Offered > 0 {
		return t.Offered
	}
	return t.Sent
}

// pdrOutcome is a search's result.
type pdrOutcome struct {
	best   *pdrTrial  // the highest offered rate that passed, nil if none
	fail   *pdrTrial  // the lowest offered rate that failed, nil if none
	trials []pdrTrial // in the order run
}

// pdrSearch finds the highest offered rate whose loss is at most
// PDRLossPct in at most steps trials: the first at no rate limit (if it
// passes, the sender is the limit and the search ends), then a binary
// search between 0 and the rate that first trial's sender reached. The
// answer lies within that rate / 2^(steps-1) below the true one. trial
// runs one transfer at an offered rate (0: no limit).
func pdrSearch(ctx context.Context, steps int, trial func(ctx context.Context, rate float64) (pdrTrial, error)) (pdrOutcome, error) {
	var out pdrOutcome
	first, err := trial(ctx, 0)
	if err != nil {
		return out, err
	}
	out.trials = append(out.trials, first)
	if first.pass() {
		out.best = &out.trials[0]
		return out, nil
	}
	lo, hi := 0.0, first.Sent
	failAt := 0
	bestAt := -1
	for len(out.trials) < steps && hi > 0 {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		rate := (lo + hi) / 2
		t, err := trial(ctx, rate)
		if err != nil {
			return out, err
		}
		t.Offered = rate
		out.trials = append(out.trials, t)
		if t.pass() {
			lo, bestAt = rate, len(out.trials)-1
		} else {
			hi, failAt = rate, len(out.trials)-1
		}
	}
	if bestAt >= 0 {
		out.best = &out.trials[bestAt]
	}
	out.fail = &out.trials[failAt]
	return out, nil
}

// pdrLimit says what limits a search's rate: the sender if nothing
// failed, else where the lowest failing trial lost most of its datagrams.
func pdrLimit(o pdrOutcome) string {
	f := o.fail
	if f == nil {
		return "the sender: no loss above the limit at the highest rate it sends"
	}
	where := []struct {
		n    uint64
		what string
	}{
		{f.SockDrops, "the receiving socket (the receiver did not keep up)"},
		{f.DevDrops, "the sending guest's device queue (the datapath did not take the packets in time)"},
		{f.PathDrops, "the datapath's own drops"},
	}
	top := where[0]
	for _, w := range where[1:] {
		if w.n > top.n {
			top = w
		}
	}
	if top.n == 0 || f.Lost == 0 {
		return fmt.Sprintf("loss not counted at the devices, the datapath or the socket (%.2f%% at %.2f Gbit/s offered)", f.LossPct, f.offered()/1e9)
	}
	return fmt.Sprintf("%s: %.0f%% of the %.2f%% lost at %.2f Gbit/s offered", top.what,
		100*float64(min(top.n, f.Lost))/float64(f.Lost), f.LossPct, f.offered()/1e9)
}
