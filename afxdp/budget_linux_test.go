package afxdp

import (
	"testing"

	"softnet.dev/buffer"
)

// What one worker may lend its queues stays within WorkerBuffers however
// many queues it serves: each queue keeps a floor of minFloor while the
// floors fit in FloorBuffers, then the floors shrink; and the queues that
// leave give their share back. No kernel needed: the budget is the
// worker's own bookkeeping.
func TestBudgetBoundedPerWorker(t *testing.T) {
	p := &Port{frames: 16384}
	c := new(buffer.Cache) // a worker's identity, as the budgets key it
	var qs []*rxQueue
	for n := 1; n <= 300; n++ {
		q := &rxQueue{p: p}
		q.join(c)
		qs = append(qs, q)
		b := q.budget
		if most := b.floor*n + b.shared; most > WorkerBuffers {
			t.Fatalf("%d queues: floors of %d and %d shared: %d frames lent at most, above WorkerBuffers (%d)", n, b.floor, b.shared, most, WorkerBuffers)
		}
		switch {
		case n <= FloorBuffers/minFloor && b.floor < minFloor:
			t.Fatalf("%d queues: floor %d, below %d while the floors fit", n, b.floor, minFloor)
		case b.floor < 1:
			t.Fatalf("%d queues: floor %d", n, b.floor)
		}
	}
	// Every queue lends all it may, in turn, each to a target of a whole
	// ring: together they stay within the bound.
	b := qs[0].budget
	total := 0
	for _, q := range qs {
		q.target = DefaultRxRing
		a := b.allowance(q)
		if a < b.floor {
			t.Fatalf("a queue may lend %d, below its floor %d", a, b.floor)
		}
		b.lend(q, a)
		total += a
	}
	if total > WorkerBuffers || total != len(qs)*b.floor+b.shared {
		t.Errorf("%d queues lend %d frames, want their floors (%d each) and the shared %d, within %d", len(qs), total, b.floor, b.shared, WorkerBuffers)
	}
	for _, q := range qs {
		b.lend(q, -q.lent)
		q.target = b.floor
	}
	for _, q := range qs[100:] {
		q.leave()
	}
	if b.floor != max(minFloor, min(maxFloor, b.shared/100)) {
		t.Errorf("100 queues left: floor %d", b.floor)
	}
	for _, q := range qs[:100] {
		q.leave()
	}
	budgets.Lock()
	defer budgets.Unlock()
	if budgets.m[c] != nil {
		t.Error("a worker without queues keeps its budget")
	}
}
