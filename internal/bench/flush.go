package bench

import (
	"context"
	"sync"
	"sync/atomic"
)

// The flush experiment isolates one step of deferred remote free (the
// kernel's skb_defer_free_flush): the owner detaching its remote-free list,
// under a lock or with one atomic swap (the form buffer.Cache.Drain uses). Alone, each operation is one remote free plus
// one flush of the one-entry list it made; contended, a freer on the other
// core pushes without pause while the owner flushes.
var flushExperiment = &Experiment{
	Name:   "flush",
	Desc:   "detach a remote-free list: mutex vs one atomic swap",
	Metric: "ns_per_flush",
	Unit:   "ns",
	Variants: []Variant{
		{Name: "mutex", Prepare: prepareFlush(newMutexList, false)},
		{Name: "swap", Prepare: prepareFlush(newSwapList, false)},
		{Name: "mutex-contended", Prepare: prepareFlush(newMutexList, true)},
		{Name: "swap-contended", Prepare: prepareFlush(newSwapList, true)},
	},
	Goals: []Goal{
		{Variant: "swap", Against: "mutex", Bound: 1},
		{Variant: "swap-contended", Against: "mutex-contended", Bound: 1},
	},
}

const flushNodes = 1024

type freeList interface {
	push(node uint32)
	flush() uint64 // returns the detached head, 0 if the list was empty
}

// mutexList is the list as the kernel's skb_defer_free_flush kept it
// before it became a lockless list: head and count behind a lock.
type mutexList struct {
	mu    sync.Mutex
	head  uint32
	count uint32
	next  []uint32
}

func newMutexList() freeList { return &mutexList{next: make([]uint32, flushNodes)} }

func (l *mutexList) push(node uint32) {
	l.mu.Lock()
	l.next[node] = l.head
	l.head = node + 1
	l.count++
	l.mu.Unlock()
}

func (l *mutexList) flush() uint64 {
	l.mu.Lock()
	h := uint64(l.count)<<32 | uint64(l.head)
	l.head, l.count = 0, 0
	l.mu.Unlock()
	return h
}

// swapList packs count and head in one word, as buffer's inbound list.
type swapList struct {
	head atomic.Uint64
	next []uint32
}

func newSwapList() freeList { return &swapList{next: make([]uint32, flushNodes)} }

func (l *swapList) push(node uint32) {
	for {
		old := l.head.Load()
		l.next[node] = uint32(old)
		if l.head.CompareAndSwap(old, (old>>32+1)<<32|uint64(node+1)) {
			return
		}
	}
}

func (l *swapList) flush() uint64 {
	if l.head.Load() == 0 {
		return 0
	}
	return l.head.Swap(0)
}

func prepareFlush(newList func() freeList, contended bool) func() (func(context.Context, int) int, func() error, error) {
	return func() (func(context.Context, int) int, func() error, error) {
		l := newList()
		if !contended {
			return func(ctx context.Context, n int) int {
				for i := range n {
					if stopped(ctx, i) {
						return i
					}
					l.push(uint32(i) % flushNodes)
					l.flush()
				}
				return n
			}, noCleanup, nil
		}
		return func(ctx context.Context, n int) int {
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint32(0); !stop.Load(); i++ {
					l.push(i % flushNodes)
				}
			}()
			done := n
			for i := range n {
				if stopped(ctx, i) {
					done = i
					break
				}
				l.flush()
			}
			stop.Store(true)
			wg.Wait()
			return done
		}, noCleanup, nil
	}
}
