// Package program holds softnet's batch programs (XDP-style): a Program
// sees a whole batch of packets from one ingress port and sets a Verdict
// per packet — pass to the next program, drop with a reason, transmit back
// out of the ingress port, redirect to a port, flood, or deliver to a
// local consumer. The engine runs the chain once per batch and submits
// egress once per batch per port.
//
// Built-in programs: PortSecurity (what each port's guest may claim to
// be: source addresses, MACs, ARP and neighbour discovery claims, DHCP
// server messages), L3Forwarder (static routes, then addresses learned
// per port where no route covers them), Bridge (an L2 learning bridge
// with ageing and a per-port share of its table) and Filter (by prefix,
// protocol and port). The chain is engine.Config.Programs. Programs are
// shared by all workers: Run is called concurrently, and their tables are
// read without locks.
package program
