// Package port defines what softnet's engine moves packets through: a Port
// with N queues that receive and transmit bursts of buffers. Package tun
// (TUN and TAP devices), vhostuser (VMs), vxlan (an overlay), memport
// (in-memory ports) and endpoint (applications) implement it; anything
// else that moves bursts of packets can, and is then passed to engine.New
// like them.
//
// A worker polls one RxQueue of every port it serves and owns one TxQueue
// of every port, so neither side takes a lock. Buffers come from and go
// back to the polling worker's buffer.Cache, passed into every call:
//
//	n, err := rx.Receive(cache, bufs) // never blocks; drops go into cache
//	sent, err := tx.Transmit(cache, bufs[:n]) // takes every buffer, sent or dropped
//
// An RxQueue is also a Waiter, so that an idle worker can sleep in epoll
// until its FD is readable (Arm, then Disarm). The engine closes its ports
// with CloseInto, purging what they hold into its own cache. Notifier is
// an optional contract between a queue and the worker.
//
// Design: docs/design.md, "The shape of the datapath".
package port
