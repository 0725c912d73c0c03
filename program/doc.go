// Package program holds softnet's batch programs (XDP-style): a Program
// sees a whole batch of packets from one ingress port and sets a Verdict
// per packet — pass to the next program, drop with a reason, transmit back
// out of the ingress port, redirect to a port, flood, or deliver to a
// local consumer. The engine runs the chain once per batch and submits
// egress once per batch per port.
//
// Built-in programs: L3Forwarder (static routes and addresses learned per
// port), Bridge (an L2 learning bridge with ageing) and Filter (by prefix,
// protocol and port). The chain is engine.Config.Programs. Programs are
// shared by all workers: Run is called concurrently, and their tables are
// read without locks.
package program
