package lab

import (
	"softnet.dev/buffer"
)

// datapath joins the two guests of a variant. Its devices exist once it
// is opened; the guests' addresses are configured afterwards.
type datapath interface {
	// counters returns what an in-process datapath has forwarded so far,
	// in both directions; ok is false for the kernel's own path.
	counters() (c forwarded, ok bool)
	// buffers returns the softnet pool's statistics; ok is false for
	// other datapaths.
	buffers() (s buffer.Stats, ok bool)
	// workerThreads returns the OS threads that did the forwarding, as
	// far as they are known and fixed (softnet's locked workers); nil if
	// there are none to name.
	workerThreads() []int
	// poolBytes is the size of the packet-buffer pool, 0 if there is none.
	poolBytes() int64
	// close stops the datapath and removes its devices. For softnet the
	// returned leak is "ok" or the pool's leak check failure; err is any
	// other failure. It is called once.
	close() (leak string, err error)
}

// forwarded counts packets and bytes an in-process datapath handed on.
type forwarded struct {
	packets, bytes uint64
	// What the datapath received, where it counts it (softnet): a GSO
	// packet counts once.
	rxPackets, rxBytes uint64
}
