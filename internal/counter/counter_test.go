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

// A block's drops land at first + reason, a reason past the enumeration
// at its last; readers see them once published.
func TestBlockDrop(t *testing.T) {
	const first = 2
	b := NewBlock(first + int(drop.NumReasons))
	b.Drop(first, drop.NoMem)
	b.Drop(first, drop.NumReasons+7)
	sum := make([]uint64, len(b.N))
	b.AddTo(sum)
	if sum[first+int(drop.NoMem)] != 0 {
		t.Fatal("a drop visible before Publish")
	}
	b.Publish()
	b.AddTo(sum)
	if sum[first+int(drop.NoMem)] != 1 || sum[first+int(drop.NumReasons)-1] != 1 {
		t.Fatalf("published %v", sum)
	}
}
