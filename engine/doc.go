// Package engine is softnet's datapath: workers that poll the queues of
// every port, NAPI style, run a chain of batch programs over each burst
// and hand the packets to their egress ports once per batch.
//
//	e, err := engine.New(engine.Config{Pool: pool, Workers: 2, Programs: chain}, tapA, tapB)
//	if err != nil {
//		return err
//	}
//	e.Start()
//	defer e.Close() // stops the workers and closes the ports
//	st := e.Stats() // per worker and per port, at any time
//
// Each worker owns a buffer.Cache, an RX queue of each port it serves and
// a TX queue of every port, so the hot path takes no lock; an idle worker
// sleeps in epoll_wait. AddPort and RemovePort change the ports while
// the workers run. Every RX queue gets the same budget per round
// (Config.Batch), so a flooding port cannot starve the others. A program
// that panics loses its batch (drop.Prog); a port whose queue fails is
// marked down and the rest keep forwarding. Consumers and Pollers
// (package endpoint) take packets inside the process.
//
// Design: docs/design.md, "The worker loop (NAPI polling)".
package engine
