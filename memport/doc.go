// Package memport provides in-memory ports, the devices softnet's tests
// and unprivileged benchmarks run on: nothing here needs root, a TUN
// device or a network namespace.
//
//   - NewPair makes an in-process veth: two PairPorts whose queues are
//     joined by a ring per direction, passing buffer pointers, not bytes.
//   - NewGenerator makes a receive-only port that synthesizes valid UDP
//     flows (IPv4 or IPv6, numbered per flow) at a few integer operations
//     per packet.
//   - NewSink makes a transmit-only port that checks what it is given for
//     loss, reordering and corruption (SinkStats) and frees it, on the
//     transmitting worker or on a completion goroutine.
//
// A generator feeding a sink through an engine:
//
//	gen, _ := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Count: 10000})
//	sink, _ := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3})
//	eng, _ := engine.New(engine.Config{Pool: pool, Programs: chain}, gen, sink)
//
// Layer's zero value is packet.L2: set packet.L3 for bare IP packets.
// Addresses come only from 198.18.0.0/15 and 2001:db8::/32 (FlowAddrs).
//
// Design (and the generated payload's format): docs/design.md, "In-memory
// ports".
package memport
