package vnet

import (
	"testing"

	"softnet.dev/port"
)

// The offloads a header needs: checksum, the GSO type's (USO by IP
// version), ECN, and Unsupported for a GSO type no port takes (UFO).
func TestHeaderOffloads(t *testing.T) {
	for _, c := range []struct {
		h    Header
		ipv6 bool
		want port.Offloads
	}{
		{Header{}, false, 0},
		{Header{Flags: FlagNeedsCsum}, false, port.OffloadCsum},
		{Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv4}, false, port.OffloadCsum | port.OffloadTSO4},
		{Header{GSOType: GSOTCPv6 | GSOECN}, true, port.OffloadTSO6 | port.OffloadTSOECN},
		{Header{GSOType: GSOUDPL4}, false, port.OffloadUSO4},
		{Header{GSOType: GSOUDPL4}, true, port.OffloadUSO6},
		{Header{GSOType: GSOUDP}, false, Unsupported}, // UFO
	} {
		if got := c.h.Offloads(c.ipv6); got != c.want {
			t.Errorf("%+v (ipv6 %v): %v, want %v", c.h, c.ipv6, got, c.want)
		}
	}
}
