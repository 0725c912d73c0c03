// Package attach is the contract between softnet's engine and the port
// queues whose kernel state belongs to one OS thread (tun's io_uring
// rings, single-issuer). It is internal: a worker's thread is the
// engine's business, and a port that works from any thread needs none of
// it.
package attach

import "softnet.dev/buffer"

// Queue is an RxQueue or TxQueue whose kernel state belongs to the OS
// thread that uses it. A worker locks its goroutine to its thread, then
// calls Attach before it first uses the queue and Detach after it last
// did, both on that thread and with its cache: Detach takes back into it
// every buffer the queue lent to the kernel. A queue used without Attach
// works from any thread.
type Queue interface {
	Attach(c *buffer.Cache)
	Detach(c *buffer.Cache)
}
