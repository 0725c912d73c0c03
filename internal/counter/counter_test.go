package counter

import (
	"sync"
	"testing"

	"softnet.dev/drop"
)

func TestPublishOnlyWhatChanged(t *testing.T) {
	p := NewPublished(3)
	vals := []uint64{1, 0, 5}
	p.Publish(vals)
	if p.Load(0) != 1 || p.Load(1) != 0 || p.Load(2) != 5 {
		t.Fatal("first publish")
	}
	vals[0] = 7
	p.Publish(vals)
	sum := make([]uint64, 3)
	p.AddTo(sum)
	p.AddTo(sum)
	if sum[0] != 14 || sum[2] != 10 {
		t.Fatalf("sum %v", sum)
	}
	if n := testing.AllocsPerRun(100, func() { vals[1]++; p.Publish(vals) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// The owner publishes while readers load: the race detector must see no
// race and readers must never see a counter go backwards.
func TestConcurrentReaders(t *testing.T) {
	p := NewPublished(1)
	vals := []uint64{0}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v := p.Load(0); v < last {
				t.Errorf("went backwards: %d after %d", v, last)
				return
			} else {
				last = v
			}
		}
	}()
	for range 100000 {
		vals[0]++
		p.Publish(vals)
	}
	close(stop)
	wg.Wait()
}

// A block's drops land after its own counters, receive then transmit, a
// reason past the enumeration at its last; readers see them once
// published.
func TestBlockDrop(t *testing.T) {
	const own = 2
	b := NewBlock(own)
	b.RxDrop(drop.NoMem)
	b.RxDrop(drop.NumReasons + 7)
	b.TxDrop(drop.NoRoute)
	sum := make([]uint64, Len(own))
	b.AddTo(sum)
	if rx, _ := Drops(sum, own); rx[drop.NoMem] != 0 {
		t.Fatal("a drop visible before Publish")
	}
	b.Publish()
	b.AddTo(sum)
	rx, tx := Drops(sum, own)
	if rx[drop.NoMem] != 1 || rx[drop.NumReasons-1] != 1 || tx[drop.NoRoute] != 1 || sum[0] != 0 || sum[1] != 0 {
		t.Fatalf("published %v", sum)
	}
}
