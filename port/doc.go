// Package port defines what softnet's engine moves packets through: a Port
// with N queues, receiving and transmitting bursts of buffers. A TUN/TAP
// device, an io_uring socket, a UDP overlay and the in-memory ports of
// package memport all fit behind the same three small interfaces.
//
// A worker polls one RxQueue of every port it serves and owns one TxQueue
// of every port, so neither side takes a lock. Buffers come from and go
// back to the polling worker's buffer.Cache, which is passed into every
// call: a queue never keeps a cache of its own.
package port
