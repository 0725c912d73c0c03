// Package engine is softnet's datapath: NAPI-style workers that poll the
// queues of every port, run a chain of batch programs over each burst and
// submit egress once per batch per port.
//
// New takes a Config (the buffer pool, the worker count, the program chain,
// local consumers and pollers) and the ports; Start runs the workers, Stop
// stops them, and Close closes the engine and its ports. Stats reads
// per-worker and per-port counters at any time.
//
// Each worker owns a buffer.Cache, one RX queue of every port it serves
// and one TX queue of every port, so the hot path takes no lock. A round
// drains the worker's deferred-free list, then polls each RX queue for up
// to Config.Batch packets (the budget), runs the programs, and hands the
// packets to their egress queues and local consumers. A worker that finds
// no work for a few rounds arms its queues and sleeps in epoll_wait until
// a queue has packets, another worker's remote frees kick it, or the
// engine stops it. A worker whose round moved nothing because its pool
// was empty (packets wait, buffers do not) waits instead for its buffers
// to come home, for a kick or at most a few hundred microseconds: polling
// a readable TUN file again at once would spin.
//
// With Config.BusyPoll a worker that found work keeps polling for that
// long after its last packet before it sleeps (the kernel's
// napi_busy_poll): a packet that follows soon costs no wake-up. A worker
// that found nothing since it woke sleeps as without it, so an idle
// engine stays idle.
//
// AddPort and RemovePort change the ports while the workers run, RCU
// style: the ports are an immutable set a worker loads once per round;
// a change publishes a new one and waits until every worker has taken it
// up (given up the queues of ports that left, taken on those that
// joined) before a removed port is closed. The hot path takes no lock
// for it. A port's index is chosen, and the caller's per-index state set
// up, inside the change, so nothing else can take the index meanwhile. A
// change that some worker does not take up in time (a stuck program)
// fails with ErrNotAdopted and leaves no half-added port; a port that
// worker may still use stays open, and its index reserved, until every
// worker has let it go.
//
// Queues that are port.Attachers (TUN queues on io_uring) keep kernel
// state that belongs to one OS thread: a worker, whose goroutine is
// locked to its thread, attaches them when it takes them on and
// detaches them, taking back every buffer they lent, when it gives them
// up or stops.
//
// Fair share: every RX queue gets the same budget per round, so a port
// that always has packets (a guest flooding at full rate) takes at most
// Config.Batch of them per round and the other ports are polled in
// between. A round dispatches every packet it received before it polls
// the next queue, so what a port holds of the pool is one batch plus
// what its packets wait in bounded places: egress rings (a TUN write is
// synchronous and holds nothing) and local consumers, which bound what
// they hold (package endpoint's per-endpoint quota).
//
// A program that panics loses its batch: every packet of it is dropped
// with drop.Prog and the worker keeps running. A port whose queue returns
// an error is marked down for good and no longer polled or sent to; the
// rest of the engine keeps forwarding. Passing states, such as a TUN
// device set down, are the port's to absorb (package tun drops toward it
// as drop.DevReady without an error).
package engine
