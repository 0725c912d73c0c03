//go:build linux

package vhostuser

import "testing"

// wantRefused checks that p counted n refusals of reason r.
func wantRefused(t testing.TB, p *Port, r Refusal, n uint64) {
	t.Helper()
	if s := p.Stats(); s.Refusals[r] != n {
		t.Errorf("%d %s refusals, want %d; refusals %v", s.Refusals[r], r, n, s.Refusals)
	}
}

// refusalsWait waits until p counted a refusal of reason r.
func refusalsWait(t testing.TB, p *Port, r Refusal) {
	t.Helper()
	waitFor(t, func() bool { return p.Stats().Refusals[r] > 0 }, "a "+r.String()+" refusal")
}

// callsFailed is Stats.CallsFailed, polls Stats.Polls.
func callsFailed(p *Port) uint64 { return p.Stats().CallsFailed }
func polls(p *Port) uint64       { return p.Stats().Polls }
