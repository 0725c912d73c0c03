// Package memport provides in-memory ports: the devices softnet's tests and
// its unprivileged benchmark run on. Nothing here needs root, a TUN device
// or a network namespace.
//
//   - Pair (NewPair) is an in-process veth: two PairPorts whose queue i
//     are joined by one SPSC ring per direction. Transmit passes buffer
//     pointers, not bytes, like a kernel veth passing the skb, and an
//     eventfd per receive queue wakes a sleeping worker.
//   - Generator (NewGenerator) is a receive-only port that synthesizes
//     valid UDP traffic, numbered per flow so that a sink can detect loss
//     and reordering, at a few integer operations per packet beyond the
//     copy of a template.
//   - Sink (NewSink) is a transmit-only port that validates what it is
//     given and frees it, either on the transmitting worker (Inline) or on
//     a completion goroutine per queue (Deferred), which exercises the
//     buffer pool's deferred remote free.
//
// # Payload format
//
// Every generated packet is an IPv4 or IPv6 UDP packet (optionally behind
// an Ethernet header) whose UDP payload is
//
//	offset  size  field
//	0       4     Magic, big endian
//	4       4     flow id, big endian
//	8       8     sequence number within the flow, from 0, big endian
//	16      ...   pattern: payload byte 16+i is PatternByte(i)
//
// The smallest packet, 64 bytes of IPv6, leaves exactly HeaderLen bytes of
// UDP payload, so the header has no room for a payload checksum or for a
// "seq and ^seq" pair that would keep the UDP checksum constant. Instead
// the generator copies a per-(flow, size) template whose UDP checksum is
// correct for sequence number 0 and adds the sequence number's four 16-bit
// words to it (RFC 1624 incremental update): a handful of integer
// operations per packet. The pattern is the same for every flow, so a
// sink validates a payload with one memory compare, and the UDP checksum
// (verified by a Full sink) covers the whole datagram.
//
// GenConfig.HeadersOnly emulates a device that writes payloads by DMA,
// at no cost to the CPU: the generator writes the headers and the payload
// header, with MagicHeadersOnly, and leaves the pattern out, so that the
// rest of the payload is whatever the frame held. Such a packet has no
// UDP checksum (0), since nobody summed its payload; a sink checks its
// headers and sequence, not its payload, and counts it apart
// (SinkStats.HeadersOnly) rather than as bad.
//
// Addresses come only from the benchmarking ranges 198.18.0.0/15 (RFC
// 2544) and 2001:db8::/32 (RFC 3849); see FlowAddrs.
//
// # Layer
//
// The configs take a packet.Layer. packet.L2 is that type's zero value, so
// a config that leaves Layer unset describes Ethernet frames; set
// packet.L3 for bare IP packets.
package memport
