package program_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"softnet.dev/buffer"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// runOne runs p over a batch of one packet that fill writes, as if it had
// arrived on port ingress, and returns the verdict.
func runOne(cache *buffer.Cache, p program.Program, layer packet.Layer, ingress int, fill func([]byte) int) program.Verdict {
	buf, err := cache.Get(buffer.ClassMTU)
	if err != nil {
		panic(err)
	}
	defer cache.Consume(buf)
	data, _ := buf.Append(buf.Tailroom())
	buf.Truncate(fill(data))
	b := program.NewBatch(1)
	b.Bufs = append(b.Bufs, buf)
	b.Reset(1)
	b.Layer, b.Ingress = layer, ingress
	p.Run(b)
	return b.Verdicts[0]
}

func udpFrom(src, dst string) func([]byte) int {
	return func(b []byte) int {
		return packet.PutUDP(b, netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), []byte("hello"))
	}
}

// Two guests on TUN ports 1 and 2 and an uplink on port 0: the guests'
// addresses are learned from what they send, 192.0.2.0/24 is routed to
// the uplink (and so never learned, whoever sends from it).
func ExampleL3Forwarder() {
	pool, _ := buffer.NewPool(buffer.Config{})
	cache, _ := pool.NewCache(nil)
	fwd, err := program.NewL3Forwarder(program.L3Config{
		Routes:       []program.Route{{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Port: 0}},
		Unknown:      program.DropUnknown,
		DecrementTTL: true,
	})
	if err != nil {
		panic(err)
	}
	send := func(ingress int, src, dst string) {
		v := runOne(cache, fwd, packet.L3, ingress, udpFrom(src, dst))
		fmt.Printf("port %d: %s > %s: %v\n", ingress, src, dst, v)
	}
	send(1, "10.0.0.1:5000", "192.0.2.7:53") // routed; 10.0.0.1 is learned
	send(2, "10.0.0.2:6000", "10.0.0.1:7")   // learned host
	send(0, "192.0.2.7:53", "10.0.0.1:5000") // the answer
	send(1, "10.0.0.1:5000", "10.0.0.1:9")   // back where it came from
	send(2, "[fd00::2]:9", "[fd00::1]:9")    // no IPv6 route: DropUnknown
	learned := fwd.Learned()
	for _, a := range slices.SortedFunc(maps.Keys(learned), netip.Addr.Compare) {
		fmt.Println("learned", a, "on port", learned[a])
	}
	fmt.Println("leak check:", pool.Close())
	// Output:
	// port 1: 10.0.0.1:5000 > 192.0.2.7:53: redirect(0)
	// port 2: 10.0.0.2:6000 > 10.0.0.1:7: redirect(1)
	// port 0: 192.0.2.7:53 > 10.0.0.1:5000: redirect(1)
	// port 1: 10.0.0.1:5000 > 10.0.0.1:9: drop(NO_ROUTE)
	// port 2: [fd00::2]:9 > [fd00::1]:9: drop(NO_ROUTE)
	// learned 10.0.0.1 on port 1
	// learned 10.0.0.2 on port 2
	// learned fd00::2 on port 2
	// leak check: <nil>
}

// A bridge between TAP ports: an ARP request is flooded, the reply goes
// straight back, and the table shows both stations.
func ExampleBridge() {
	pool, _ := buffer.NewPool(buffer.Config{})
	cache, _ := pool.NewCache(nil)
	br := program.NewBridge(program.BridgeConfig{})
	alice := [6]byte{0x02, 0, 0, 0, 0, 0xa}
	bob := [6]byte{0x02, 0, 0, 0, 0, 0xb}
	arp := func(op uint16, dst, from [6]byte, fromIP string, to [6]byte, toIP string) func([]byte) int {
		return func(b []byte) int {
			n := packet.PutEthernet(b, dst, from, packet.EtherTypeARP)
			return n + packet.PutARP(b[n:], op, from, netip.MustParseAddr(fromIP), to, netip.MustParseAddr(toIP))
		}
	}
	fmt.Println("who-has 10.0.0.2:", runOne(cache, br, packet.L2, 1,
		arp(packet.ARPRequest, packet.Broadcast, alice, "10.0.0.1", [6]byte{}, "10.0.0.2")))
	fmt.Println("10.0.0.2 is-at bob:", runOne(cache, br, packet.L2, 2,
		arp(packet.ARPReply, alice, bob, "10.0.0.2", alice, "10.0.0.1")))
	fmt.Println("multicast source:", runOne(cache, br, packet.L2, 2,
		arp(packet.ARPReply, alice, packet.Broadcast, "10.0.0.2", alice, "10.0.0.1")))
	for _, e := range br.Table() {
		fmt.Printf("%x on port %d\n", e.MAC, e.Port)
	}
	fmt.Println("leak check:", pool.Close())
	// Output:
	// who-has 10.0.0.2: flood
	// 10.0.0.2 is-at bob: redirect(1)
	// multicast source: drop(INVALID_PROTO)
	// 02000000000a on port 1
	// 02000000000b on port 2
	// leak check: <nil>
}

// A filter in front of the forwarder: DNS to one resolver only, no SSH,
// everything else allowed. Allowed packets keep their Pass verdict for
// the next program.
func ExampleFilter() {
	pool, _ := buffer.NewPool(buffer.Config{})
	cache, _ := pool.NewCache(nil)
	var rules []program.Rule
	for _, s := range []string{
		"allow proto=udp dst=192.0.2.53 dport=53",
		"deny proto=udp dport=53",
		"deny proto=tcp dport=22",
	} {
		r, err := program.ParseRule(s)
		if err != nil {
			panic(err)
		}
		rules = append(rules, r)
	}
	f, err := program.NewFilter(rules, true)
	if err != nil {
		panic(err)
	}
	for _, dst := range []string{"192.0.2.53:53", "198.51.100.1:53", "198.51.100.1:443"} {
		fmt.Println(dst, runOne(cache, f, packet.L3, 1, udpFrom("10.0.0.1:5000", dst)))
	}
	fmt.Println("leak check:", pool.Close())
	// Output:
	// 192.0.2.53:53 pass
	// 198.51.100.1:53 drop(FILTER)
	// 198.51.100.1:443 pass
	// leak check: <nil>
}

func ExampleParseRule() {
	r, err := program.ParseRule("deny dst=198.18.0.0/15 dport=53 proto=udp")
	fmt.Println(r, err)
	_, err = program.ParseRule("deny proto=udp dport=domain")
	fmt.Println(err)
	_, err = program.ParseRule("deny dport=53")
	fmt.Println(err)
	// Output:
	// deny proto=udp dst=198.18.0.0/15 dport=53 <nil>
	// program: rule "deny proto=udp dport=domain": token "dport=domain": want a port 1-65535 or a range LO-HI
	// program: rule "deny dport=53": token "dport=53": ports need proto=tcp or proto=udp
}
