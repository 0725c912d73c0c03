// Package endpoint gives applications in the switch's process zero-copy
// access to packets addressed to them, after io_uring's zero-copy receive
// (zcrx): received buffers are lent to the application as read-only views
// and come back through a refill ring that the worker (the NAPI side)
// drains at the top of each poll.
//
// # Model
//
// A Table holds the bound flows (a UDP local address and port, or a raw
// IP protocol and local address). It is four things to the engine at
// once:
//
//   - a program.Program: packets whose destination matches a bound flow
//     get program.DeliverVerdict(Config.Consumer);
//   - an engine.Consumer at that index: it lends the delivered buffers to
//     their endpoints;
//   - an engine.Poller: at the top of every round it takes back what the
//     applications released, and stocks send buffers;
//   - a port.Port (receive only): its RX queue of worker w yields what the
//     applications sent through w, so sent packets cross the datapath like
//     any other.
//
// For every (endpoint, worker) pair there are two single-producer
// single-consumer rings: receive (worker → application, views) and refill
// (application → worker, releases). The endpoint's home worker has two
// more: fill (worker → application, empty send buffers) and send
// (application → worker). Besides them, the worker
// shares with the application only a table of frames by buffer id, which
// it writes once per buffer and the application only reads. A view
// crosses the receive ring as a buffer id, a generation and offsets into
// the frame, and the application never touches a buffer's metadata, so
// that what each core writes stays off the lines the other reads. Which
// buffers are lent, to whom, under which generation, and how many each
// endpoint holds, is kept by the owning worker in plain arrays, without
// atomics or locks. Buffers are never freed on the application's
// goroutine.
//
// # Misuse
//
// A view carries the buffer's generation. Releasing a view twice, or a
// view the endpoint does not hold, returns ErrNotLent and changes nothing;
// the worker checks every release token again before it frees a buffer,
// so even a forged token cannot corrupt the pool. Check reports a use
// after release. With Config.Debug every release records its call site,
// a second release names both sites, and a released payload is poisoned
// (0x6b) so that a read after release sees garbage instead of plausible
// data. An application that never releases holds at most its quota: past
// it, its flow drops with drop.SocketRcvBuff and nothing else is
// affected. Close returns every buffer the endpoint holds; the workers
// free them at their next poll.
//
// # Copying
//
// ReadFrom and WriteTo are the socket-style convenience: one copy each
// way, on top of the same rings, for comparison (softnet bench zerocopy).
package endpoint
