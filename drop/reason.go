package drop

import "fmt"

// Reason says why a packet buffer was dropped. The zero value is
// NotSpecified. Names follow the kernel's SKB_DROP_REASON_* where one
// applies.
type Reason uint8

const (
	NotSpecified   Reason = iota // no better reason is known
	PktTooSmall                  // shorter than the smallest valid packet
	PktTooBig                    // longer than the port, frame or MTU allows
	HdrTrunc                     // a header runs past the end of the packet
	DevHdr                       // the device header (virtio-net) is invalid
	DevReady                     // the device or port is down
	FullRing                     // a ring or queue toward the destination is full
	NoMem                        // no buffer could be allocated
	InvalidProto                 // a header field holds an invalid value
	UnhandledProto               // a valid protocol that is not handled
	Csum                         // checksum verification failed
	GsoSeg                       // GSO segmentation failed
	Filter                       // a filter program rejected the packet
	Prog                         // a batch program failed (panicked)
	NoRoute                      // no route or forwarding entry matched
	QueuePurge                   // purged from a queue at shutdown
	SocketRcvBuff                // a local consumer's receive ring is full
	IPTTL                        // the IP TTL or hop limit expired
	IPCsum                       // the IPv4 header checksum is wrong
	// IPRPFilter: the source address is not allowed on the ingress port
	// (strict reverse-path filtering, the kernel's rp_filter=1).
	IPRPFilter
	// MACSpoof: the source MAC is not one the ingress port may use
	// (port security's MAC lock; libvirt's no-mac-spoofing).
	MACSpoof
	// ARPSpoof: an ARP packet claims an address or MAC the ingress port
	// may not use (libvirt's no-arp-spoofing).
	ARPSpoof
	// NDiscSpoof: an IPv6 neighbour advertisement or solicitation claims
	// a target address or link-layer address the ingress port may not
	// use (no-arp-spoofing for NDP; the kernel's IPV6_NDISC_* family).
	NDiscSpoof
	// DHCPServer: a DHCP or DHCPv6 server (or relay) message from a port
	// not allowed to run one (a rogue DHCP server).
	DHCPServer
	// RAGuard: an IPv6 router advertisement or redirect from a port that
	// is not a router (RFC 6105's RA guard), or a first fragment whose
	// header chain is cut short, so the guard cannot see what it carries
	// (RFC 7113).
	RAGuard
	// VXLANInvalidHdr: a VXLAN header without the I flag or with
	// reserved bits set (the kernel's VXLAN_INVALID_HDR).
	VXLANInvalidHdr
	// VXLANVNINotFound: a VXLAN datagram for a VNI the port does not
	// serve (the kernel's VXLAN_VNI_NOT_FOUND).
	VXLANVNINotFound
	// OtherHost: a frame for another station's MAC where only frames to
	// this one are taken (the kernel's OTHERHOST): a routed VXLAN port's
	// inner frames must be addressed to its VTEP.
	OtherHost
	// XDP: dropped by an XDP program in the kernel's receive path (the
	// kernel's XDP): an AF_XDP port's program drops a frame that arrives
	// on a queue without a socket.
	XDP
	// PoliceIngress: over the rate limit of what the switch receives
	// from the port (the guest's sending; the port's ingress-rate), by
	// program.Policer's token bucket; counted on that port.
	PoliceIngress
	// PoliceEgress: over the rate limit of what the switch sends to the
	// port (the guest's receiving; its egress-rate); counted on the port
	// the packet was for, not the one it came from.
	PoliceEgress
	NumReasons // the number of reasons; not a reason
)

var reasonNames = [NumReasons]string{
	NotSpecified:     "NOT_SPECIFIED",
	PktTooSmall:      "PKT_TOO_SMALL",
	PktTooBig:        "PKT_TOO_BIG",
	HdrTrunc:         "HDR_TRUNC",
	DevHdr:           "DEV_HDR",
	DevReady:         "DEV_READY",
	FullRing:         "FULL_RING",
	NoMem:            "NOMEM",
	InvalidProto:     "INVALID_PROTO",
	UnhandledProto:   "UNHANDLED_PROTO",
	Csum:             "CSUM",
	GsoSeg:           "GSO_SEG",
	Filter:           "FILTER",
	Prog:             "PROG",
	NoRoute:          "NO_ROUTE",
	QueuePurge:       "QUEUE_PURGE",
	SocketRcvBuff:    "SOCKET_RCVBUFF",
	IPTTL:            "IP_TTL",
	IPCsum:           "IP_CSUM",
	IPRPFilter:       "IP_RPFILTER",
	MACSpoof:         "MAC_SPOOF",
	ARPSpoof:         "ARP_SPOOF",
	NDiscSpoof:       "IPV6_NDISC_SPOOF",
	DHCPServer:       "DHCP_SERVER",
	RAGuard:          "IPV6_RA_GUARD",
	VXLANInvalidHdr:  "VXLAN_INVALID_HDR",
	VXLANVNINotFound: "VXLAN_VNI_NOT_FOUND",
	OtherHost:        "OTHERHOST",
	XDP:              "XDP",
	PoliceIngress:    "POLICE_INGRESS",
	PoliceEgress:     "POLICE_EGRESS",
}

// String returns the kernel-style name, such as "HDR_TRUNC".
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("REASON_%d", uint8(r))
}

// ParseReason returns the Reason named s (as printed by String).
func ParseReason(s string) (Reason, error) {
	for r, name := range reasonNames {
		if name == s {
			return Reason(r), nil
		}
	}
	return 0, fmt.Errorf("drop: unknown reason %q", s)
}

// MarshalText implements encoding.TextMarshaler, so reasons appear by name
// in JSON.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Reason) UnmarshalText(b []byte) error {
	v, err := ParseReason(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
