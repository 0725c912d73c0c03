// Package packet parses and builds the headers a virtual switch needs:
// Ethernet (with one 802.1Q tag), ARP, IPv4, IPv6 with its extension
// headers, UDP, TCP, ICMP and ICMPv6.
//
// Parse starts at the Ethernet header of a TAP frame (L2) or the IP header
// of a TUN packet (L3) and fills a caller-owned Headers with the fields
// forwarding and filtering look at and the offsets of the network and
// transport headers. Packets come from untrusted guests: Parse checks
// every length before it reads, never panics, never allocates, and says
// why a packet it rejects must be dropped:
//
//	var h packet.Headers
//	if ok, reason := packet.Parse(b.Bytes(), packet.L3, &h); !ok {
//		cache.Drop(b, reason) // drop.HdrTrunc, drop.InvalidProto, ...
//	}
//	fmt.Println(h.SrcIP, h.DstIP, h.IPProto, h.SrcPort, h.DstPort)
//
// Parse does not verify checksums; Checksum (RFC 1071, eight bytes at a
// time), IPv4HeaderChecksumOK and TransportChecksumOK do. The Put
// functions write headers into a caller's slice, for generators, replies
// and tests; unlike Parse they trust their arguments.
//
// Design: docs/design.md, "Parsing packets".
package packet
