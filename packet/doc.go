// Package packet parses and builds the packet headers a virtual switch
// needs: Ethernet (with one 802.1Q tag), ARP, IPv4, IPv6 with its extension
// headers, UDP, TCP, ICMP and ICMPv6.
//
// # Parsing
//
// Packets come from untrusted guests, so Parse checks every length before it
// reads, never reads past the slice, never panics and never allocates. It
// fills a caller-owned Headers with the fields forwarding and filtering look
// at, and with the offsets of the network and transport headers, so later
// stages (checksum offload, GSO, NAT) can go straight to them. Parsing
// starts at the Ethernet header of a TAP frame (L2) or at the IP header of a
// TUN packet (L3), where the version nibble decides between IPv4 and IPv6.
//
// A packet that cannot be parsed is reported with the drop.Reason its
// buffer should be dropped with:
//
//   - drop.PktTooSmall: a frame shorter than an Ethernet header, or an empty
//     TUN packet;
//   - drop.HdrTrunc: a header runs past the end of the packet;
//   - drop.InvalidProto: a header field holds an impossible value (IP
//     version, IHL, a length that disagrees with the buffer, ARP address
//     sizes, TCP data offset);
//   - drop.UnhandledProto: an EtherType other than IPv4, IPv6 and ARP.
//
// Lengths are judged against the IP header's own length field, not against
// the buffer: bytes after it (Ethernet padding) are allowed and ignored, and
// a transport header that the IP length cuts short is truncated even if the
// buffer holds more. A transport protocol Parse does not know is not an
// error; Headers.L4Off is then 0.
//
// ParseSnapshot parses the first bytes of a longer packet (what a capture
// keeps) the same way, taking the lengths from the headers and the
// packet's length, and reports a header the snapshot cuts as HdrTrunc.
//
// Parse does not verify checksums; IPv4HeaderChecksumOK (which the L3
// forwarder applies to every IPv4 packet) and
// TransportChecksumOK do, for the callers that must.
//
// # Checksums
//
// Checksum computes the Internet checksum of RFC 1071 eight bytes at a time,
// for any length and alignment. It takes a partial sum to start from, such
// as the one PseudoHeaderChecksum returns, so the same code serves
// verification, checksum offload and segmentation. DecrementTTL updates the
// IPv4 header checksum incrementally (RFC 1624) instead of recomputing it.
//
// # Building
//
// The Put functions write headers into a caller-provided slice and return
// the number of bytes written; they do not allocate. They are meant for
// traffic generators, replies the switch originates (ARP, neighbour
// solicitation) and tests, so unlike Parse they trust their arguments: a
// slice that is too short, or addresses of the wrong family, make them
// panic as an out-of-range index would.
package packet
