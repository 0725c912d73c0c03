package ring_test

import (
	"fmt"
	"runtime"
	"sync"

	"softnet.dev/ring"
)

func ExampleNewSPSC() {
	if _, err := ring.NewSPSC[int](6); err != nil {
		fmt.Println(err)
	}
	r, _ := ring.NewSPSC[int](8)
	fmt.Println(r.Cap(), r.Len())
	// Output:
	// ring: capacity 6: not a power of two
	// 8 0
}

// A producer goroutine hands values to the consumer; both sides spin politely
// when the ring is full or empty, since the ring itself never blocks.
func ExampleSPSC() {
	r, _ := ring.NewSPSC[int](4)
	go func() {
		for i := 1; i <= 10; {
			if r.Enqueue(i) {
				i++
			} else {
				runtime.Gosched()
			}
		}
	}()
	sum := 0
	for got := 0; got < 10; {
		if v, ok := r.Dequeue(); ok {
			sum += v
			got++
		} else {
			runtime.Gosched()
		}
	}
	fmt.Println(sum)
	// Output: 55
}

// Bulk calls move a whole batch or nothing; burst calls move what fits.
func ExampleSPSC_EnqueueBulk() {
	r, _ := ring.NewSPSC[string](4)
	fmt.Println(r.EnqueueBulk([]string{"a", "b", "c"}))
	fmt.Println(r.EnqueueBulk([]string{"d", "e"}), r.Len())
	fmt.Println(r.EnqueueBurst([]string{"d", "e"}), r.Len())

	out := make([]string, 3)
	fmt.Println(r.DequeueBulk(out), out)
	fmt.Println(r.DequeueBulk(out), r.Len())
	n := r.DequeueBurst(out)
	fmt.Println(n, out[:n])
	// Output:
	// true
	// false 3
	// 1 4
	// true [a b c]
	// false 1
	// 1 [d]
}

// Several producers share one MPSC ring; each producer's elements come out
// in the order it sent them, interleaved with the others'.
func ExampleMPSC() {
	r, _ := ring.NewMPSC[[2]int](16)
	const producers, each = 3, 100
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := 0; i < each; {
				if r.Enqueue([2]int{p, i}) {
					i++
				} else {
					runtime.Gosched()
				}
			}
		})
	}
	next := make([]int, producers)
	buf := make([][2]int, 8)
	for got := 0; got < producers*each; {
		n := r.DequeueBurst(buf)
		for _, v := range buf[:n] {
			if v[1] != next[v[0]] {
				fmt.Println("out of order:", v)
			}
			next[v[0]]++
		}
		got += n
		if n == 0 {
			runtime.Gosched()
		}
	}
	wg.Wait()
	fmt.Println(next, r.Len())
	// Output: [100 100 100] 0
}
