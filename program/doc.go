// Package program holds softnet's batch programs, XDP style: a Program
// sees a batch of packets from one ingress port and gives each a Verdict
// (pass, drop with a reason, transmit back, redirect, flood, or deliver to
// a local consumer). The chain is engine.Config.Programs; the first
// program that decides a packet's fate wins.
//
//	sec, _ := program.NewPortSecurity(map[int]program.PortPolicy{1: {Allow: program.Allow{Prefixes: guestPrefixes}}})
//	deny, _ := program.ParseRule("deny proto=udp dport=53")
//	filter, _ := program.NewFilter([]program.Rule{deny}, true)
//	fwd, _ := program.NewL3Forwarder(program.L3Config{Routes: routes, DecrementTTL: true})
//	chain := []program.Program{sec, filter, fwd} // or NewBridge for L2 ports; Func for your own
//
// Programs are shared by all workers: Run is called concurrently and reads
// its tables without locks.
//
// Design: docs/design.md, "Batch programs (XDP batching)".
package program
