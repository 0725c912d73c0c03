// Package netnstest gives tests their own network hosts: named network
// namespaces (as `ip netns add` makes them) that exist for one test and
// are deleted by its cleanup, even when it fails.
//
// Tests that need them call RequireRoot first, and RequireTools for every
// other tool they run (ping, iperf3, tcpdump...). Without root,
// /dev/net/tun or a tool they are skipped, naming the Debian package to
// install, unless SOFTNET_REQUIRE_ROOT_TESTS=1 (as CI sets it), which
// turns the skip into a failure so that a CI machine missing a capability
// cannot pass by skipping. RerunWithout runs a test as on a machine
// without some tools.
//
// Namespaces share some of the host: the ARP and neighbour-discovery
// tables are one each for all of them. A test that needs hundreds of
// neighbours takes LockHost, so that its twin in another go test process
// waits, and NeighOverflows tells it whether the tables overflowed while
// it ran.
//
// Traffic in these namespaces must use only the benchmarking and
// documentation ranges 198.18.0.0/15 and 2001:db8::/32.
package netnstest
