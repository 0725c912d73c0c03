package program

import (
	"testing"

	"softnet.dev/packet"
)

// A removed port's learned hosts are forgotten, so that a port that
// takes its index later does not receive their traffic; the other
// ports' hosts stay.
func TestL3ForgetPort(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{})
	f.Run(e.batch(packet.L3, 1, 0, udp("198.18.0.1", "198.18.0.9"), udp("2001:db8::1", "2001:db8::9")))
	f.Run(e.batch(packet.L3, 2, 0, udp("198.18.0.2", "198.18.0.9")))
	f.ForgetPort(1)
	wantLearned(t, f, map[string]int{"198.18.0.2": 2})
	b := e.batch(packet.L3, 2, 0, udp("198.18.0.2", "198.18.0.1"))
	f.Run(b)
	wantVerdicts(t, b, FloodVerdict)
}

func TestBridgeForgetPortAndShare(t *testing.T) {
	e := newPktEnv(t)
	br := NewBridge(BridgeConfig{MaxEntries: 8, MaxPerPort: 8})
	br.Run(e.batch(packet.L2, 1, 0, frame(packet.Broadcast, mac(1)), frame(packet.Broadcast, mac(2))))
	br.Run(e.batch(packet.L2, 2, 0, frame(packet.Broadcast, mac(3))))
	br.ForgetPort(1)
	wantTable(t, br, BridgeEntry{MAC: mac(3), Port: 2})

	// A lowered share stops learning on a port at the bound.
	br.SetMaxPerPort(2)
	br.Run(e.batch(packet.L2, 2, 0, frame(packet.Broadcast, mac(4)), frame(packet.Broadcast, mac(5))))
	wantTable(t, br, BridgeEntry{MAC: mac(3), Port: 2}, BridgeEntry{MAC: mac(4), Port: 2})
	if st := br.Stats(); st.Full == 0 {
		t.Errorf("the refused station is not counted: %+v", st)
	}
}
