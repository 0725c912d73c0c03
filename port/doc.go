// Package port defines what softnet's engine moves packets through: a Port
// with N queues, receiving and transmitting bursts of buffers. Package tun
// (TUN and TAP devices), package vhostuser (VMs' virtio-net devices),
// package memport (in-memory ports) and package endpoint (applications)
// implement it; anything else that moves bursts of
// packets can, and is then passed to engine.New like them.
//
// A worker polls one RxQueue of every port it serves and owns one TxQueue
// of every port, so neither side takes a lock. Buffers come from and go
// back to the polling worker's buffer.Cache, which is passed into every
// call: a queue never keeps a cache of its own.
//
// An RxQueue is also a Waiter, which lets an idle worker sleep: the worker
// arms the queue (Arm), waits in epoll until its descriptor (FD) is
// readable, and disarms it after it wakes. A queue whose FD is -1 is never
// waited for.
package port
