package vnet

import "softnet.dev/port"

// Unsupported stands for an offload no port has (UFO): a packet that
// needs it never passes whole.
const Unsupported = ^port.Offloads(0)

// Offloads returns the offloads a port must accept to take a packet with
// header h whole; ipv6 says whether it is IPv6, which decides between
// USO4 and USO6.
func (h Header) Offloads(ipv6 bool) port.Offloads {
	var o port.Offloads
	if h.NeedsCsum() {
		o |= port.OffloadCsum
	}
	switch h.GSOType &^ GSOECN {
	case GSONone:
		return o
	case GSOTCPv4:
		o |= port.OffloadTSO4
	case GSOTCPv6:
		o |= port.OffloadTSO6
	case GSOUDPL4:
		if ipv6 {
			o |= port.OffloadUSO6
		} else {
			o |= port.OffloadUSO4
		}
	default:
		return Unsupported
	}
	if h.GSOType&GSOECN != 0 {
		o |= port.OffloadTSOECN
	}
	return o
}
