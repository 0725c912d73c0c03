package tun_test

import (
	"context"
	"errors"
	"log"
	"sync"

	"softnet.dev/buffer"
	"softnet.dev/tun"
)

// A program that runs no softnet engine embeds the buffer pool and TUN
// ports with the blocking API: here a bridge between two namespaces. It
// needs root and the namespaces; TestExampleBridge runs it.
func Example() {
	if err := bridge(context.Background(), "blue", "green"); err != nil {
		log.Fatal(err)
	}
}

// bridge joins a TUN device in each of two namespaces, one goroutine per
// direction, until ctx ends. The buffers hold 64 KiB, since devices with
// offloads hand over GSO packets whole. Queue.Receive blocks until packets
// are there, and fails once the device is closed.
func bridge(ctx context.Context, nsA, nsB string) error {
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 65536, Count: 512}}})
	if err != nil {
		return err
	}
	defer pool.Close() // on the error paths; runs after the devices' Close
	var devs [2]*tun.Device
	for i, ns := range []string{nsA, nsB} {
		if devs[i], err = tun.Open(tun.Config{Name: "sn0", NetNS: ns, Offload: true, GRO: true}); err != nil {
			return err
		}
		defer devs[i].Close()
	}
	var wg sync.WaitGroup
	for i, rx := range devs {
		wg.Go(func() {
			c, _ := pool.NewCache(nil) // one per goroutine; pool.Close closes it
			bufs := make([]*buffer.Buf, rx.Queue(0).BatchSize())
			for n, err := rx.Queue(0).Receive(c, bufs); err == nil; n, err = rx.Queue(0).Receive(c, bufs) {
				devs[1-i].Queue(0).Transmit(c, bufs[:n]) // frees every buffer, sent or dropped
			}
		})
	}
	<-ctx.Done()
	err = errors.Join(devs[0].Close(), devs[1].Close()) // ends both loops
	wg.Wait()
	return errors.Join(err, pool.Close()) // with the leak check
}
