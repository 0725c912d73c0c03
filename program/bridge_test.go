package program

import (
	"slices"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

func frame(dst, src [6]byte) func([]byte) int {
	return ether(dst, src, packet.EtherTypeIPv4, udp("10.0.0.1", "10.0.0.2"))
}

// wantTable compares the bridge's stations and ports, ignoring ages.
func wantTable(t *testing.T, br *Bridge, want ...BridgeEntry) {
	t.Helper()
	got := br.Table()
	for i := range got {
		got[i].Age = 0
	}
	if !slices.Equal(got, want) {
		t.Errorf("table %v, want %v", got, want)
	}
}

func TestBridgeLearnsAndForwards(t *testing.T) {
	e := newPktEnv(t)
	br := NewBridge(BridgeConfig{})
	b := e.batch(packet.L2, 1, 0, frame(mac(2), mac(1)))
	br.Run(b)
	wantVerdicts(t, b, FloodVerdict) // unknown unicast
	wantTable(t, br, BridgeEntry{MAC: mac(1), Port: 1})

	b = e.batch(packet.L2, 2, 0, frame(mac(1), mac(2)), frame(mac(3), mac(2)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1), FloodVerdict)

	b = e.batch(packet.L2, 1, 0, frame(mac(2), mac(1)), frame(mac(1), mac(4)))
	br.Run(b)
	// The second frame's destination is on its own segment.
	wantVerdicts(t, b, RedirectVerdict(2), DropVerdict(drop.NoRoute))
	wantTable(t, br, BridgeEntry{MAC: mac(1), Port: 1}, BridgeEntry{MAC: mac(2), Port: 2}, BridgeEntry{MAC: mac(4), Port: 1})

	// A frame from the station on another port within the move hold
	// does not move it (a guest sending from its neighbour's MAC) ...
	br.Run(e.batch(packet.L2, 3, int64(DefaultMoveHold)/2, frame(packet.Broadcast, mac(1))))
	b = e.batch(packet.L2, 2, int64(DefaultMoveHold)/2, frame(mac(1), mac(2)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1))
	// ... after it, the station that moved is found on its new port.
	now := int64(2 * DefaultMoveHold)
	br.Run(e.batch(packet.L2, 3, now, frame(packet.Broadcast, mac(1))))
	b = e.batch(packet.L2, 2, now, frame(mac(1), mac(2)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(3))
	if st := br.Stats(); st.Moved != 1 || st.MovesRefused != 1 {
		t.Errorf("stats %+v, want 1 move and 1 refused", st)
	}
}

func TestBridgeARP(t *testing.T) {
	e := newPktEnv(t)
	br := NewBridge(BridgeConfig{})
	b := e.batch(packet.L2, 1, 0, arpFrame(packet.ARPRequest, mac(1), "10.0.0.1", [6]byte{}, "10.0.0.2"))
	br.Run(b)
	wantVerdicts(t, b, FloodVerdict)
	b = e.batch(packet.L2, 2, 0, arpFrame(packet.ARPReply, mac(2), "10.0.0.2", mac(1), "10.0.0.1"))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1))
	b = e.batch(packet.L2, 1, 0, ether(mac(2), mac(1), packet.EtherTypeIPv4, udp("10.0.0.1", "10.0.0.2")))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2))
	wantTable(t, br, BridgeEntry{MAC: mac(1), Port: 1}, BridgeEntry{MAC: mac(2), Port: 2})
}

func TestBridgeNDP(t *testing.T) {
	e := newPktEnv(t)
	br := NewBridge(BridgeConfig{})
	b := e.batch(packet.L2, 1, 0, nsFrame(mac(1), "fd00::1", "fd00::2"))
	br.Run(b)
	wantVerdicts(t, b, FloodVerdict)
	b = e.batch(packet.L2, 2, 0, naFrame(mac(2), mac(1), "fd00::2", "fd00::1"))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1))
	b = e.batch(packet.L2, 1, 0, ether(mac(2), mac(1), packet.EtherTypeIPv6, udp("fd00::1", "fd00::2")))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2))
}

func TestBridgeAgeing(t *testing.T) {
	e := newPktEnv(t)
	const s = int64(time.Second)
	br := NewBridge(BridgeConfig{AgeingTime: 10 * time.Second})
	br.Run(e.batch(packet.L2, 1, 100*s, frame(packet.Broadcast, mac(1))))
	br.Run(e.batch(packet.L2, 2, 100*s, frame(packet.Broadcast, mac(2))))

	// mac(1) speaks again at 105 s, mac(2) does not.
	br.Run(e.batch(packet.L2, 1, 105*s, frame(packet.Broadcast, mac(1))))
	b := e.batch(packet.L2, 3, 112*s, frame(mac(1), mac(3)), frame(mac(2), mac(3)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1), FloodVerdict)
	if tab := br.Table(); len(tab) != 2 || tab[0].MAC != mac(1) || tab[0].Age != 7*time.Second || tab[1].MAC != mac(3) {
		t.Errorf("table at 112 s: %v", tab)
	}

	// An expired station that speaks again is learned again.
	b = e.batch(packet.L2, 2, 113*s, frame(mac(1), mac(2)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1))
	b = e.batch(packet.L2, 1, 113*s, frame(mac(2), mac(1)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2))

	br.Age(200 * s)
	wantTable(t, br)
	if n := len(br.fdb.Load().entries); n != 0 {
		t.Errorf("Age left %d entries", n)
	}
}

func TestBridgeInvalidSources(t *testing.T) {
	e := newPktEnv(t)
	br := NewBridge(BridgeConfig{})
	b := e.batch(packet.L2, 1, 0,
		frame(mac(2), [6]byte{0x01, 0x00, 0x5e, 0, 0, 1}),
		frame(mac(2), packet.Broadcast),
		frame(mac(2), [6]byte{}),
		raw(make([]byte, 10)),
		raw([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xcc, 0, 0}), // LLDP
	)
	br.Run(b)
	wantVerdicts(t, b, DropVerdict(drop.InvalidProto), DropVerdict(drop.InvalidProto), DropVerdict(drop.InvalidProto),
		DropVerdict(drop.PktTooSmall), DropVerdict(drop.UnhandledProto))
	wantTable(t, br)

	// L3 batches are not the bridge's.
	b = e.batch(packet.L3, 1, 0, udp("10.0.0.1", "10.0.0.2"))
	br.Run(b)
	wantVerdicts(t, b, PassVerdict)
}

func TestBridgeTableFull(t *testing.T) {
	e := newPktEnv(t)
	const s = int64(time.Second)
	br := NewBridge(BridgeConfig{MaxEntries: 2, MaxPerPort: 2, AgeingTime: 10 * time.Second, MoveHold: 1})
	br.Run(e.batch(packet.L2, 1, 0, frame(packet.Broadcast, mac(1)), frame(packet.Broadcast, mac(11))))
	b := e.batch(packet.L2, 2, 0, frame(mac(1), mac(2)), frame(mac(1), mac(2)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1), RedirectVerdict(1))
	wantTable(t, br, BridgeEntry{MAC: mac(1), Port: 1}, BridgeEntry{MAC: mac(11), Port: 1})
	b = e.batch(packet.L2, 1, s/2, frame(mac(2), mac(1)))
	br.Run(b)
	wantVerdicts(t, b, FloodVerdict) // mac(2) was not learned

	// A known station may still move while the table is full.
	br.Run(e.batch(packet.L2, 3, s/2, frame(packet.Broadcast, mac(11))))
	wantTable(t, br, BridgeEntry{MAC: mac(1), Port: 1}, BridgeEntry{MAC: mac(11), Port: 3})

	// Once mac(11) ages out there is room again.
	br.Run(e.batch(packet.L2, 1, 8*s, frame(packet.Broadcast, mac(1))))
	br.Run(e.batch(packet.L2, 2, 12*s, frame(mac(1), mac(2))))
	b = e.batch(packet.L2, 1, 12*s, frame(mac(2), mac(1)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2))
	wantTable(t, br, BridgeEntry{MAC: mac(1), Port: 1}, BridgeEntry{MAC: mac(2), Port: 2})
}

// A port flooding random source MACs fills its share of the table, not
// the table: the others keep their entries and keep learning.
func TestBridgePerPortShare(t *testing.T) {
	e := newPktEnv(t)
	const s = int64(time.Second)
	br := NewBridge(BridgeConfig{MaxEntries: 8, MaxPerPort: 3, AgeingTime: 10 * time.Second})
	br.Run(e.batch(packet.L2, 1, 0, frame(packet.Broadcast, mac(1)), frame(packet.Broadcast, mac(2))))
	for round := range 4 {
		var flood []func([]byte) int
		for i := range 40 {
			flood = append(flood, frame(mac(1), mac(byte(100+i))))
		}
		b := e.batch(packet.L2, 9, int64(round)*s, flood...)
		br.Run(b)
		for i := range flood { // the flooder's frames still reach port 1's station
			if b.Verdicts[i] != RedirectVerdict(1) {
				t.Fatalf("round %d frame %d: %v", round, i, b.Verdicts[i])
			}
		}
	}
	on := map[int]int{}
	for _, en := range br.Table() {
		on[en.Port]++
	}
	if on[9] != 3 || on[1] != 2 {
		t.Fatalf("stations by port %v, want 3 on the flooding port and port 1's 2", on)
	}
	// Another port still learns, and port 1's stations still forward.
	br.Run(e.batch(packet.L2, 2, 4*s, frame(packet.Broadcast, mac(50))))
	b := e.batch(packet.L2, 1, 4*s, frame(mac(50), mac(1)), frame(mac(2), mac(1)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2), DropVerdict(drop.NoRoute))
	st := br.Stats()
	// Every flood frame but the 3 learned ones' is refused, every round.
	if st.Stations != 6 || st.Full != 37*4 || st.Learned != 6 {
		t.Errorf("stats %+v, want 6 stations, 6 learned, %d refused", st, 37*4)
	}
	// Once the flooder's stations age out, its share is free again.
	br.Run(e.batch(packet.L2, 1, 12*s, frame(packet.Broadcast, mac(1))))
	br.Run(e.batch(packet.L2, 9, 14*s, frame(packet.Broadcast, mac(200))))
	on = map[int]int{}
	for _, en := range br.Table() {
		on[en.Port]++
	}
	if on[9] != 1 {
		t.Errorf("stations by port %v after ageing, want 1 on port 9", on)
	}
}

// TestBridgeLearnsWithinABatch checks that a station the batch itself
// learned, once its learning is committed mid-batch, is found by the
// batch's later frames, however often the batch repeats a station.
func TestBridgeLearnsWithinABatch(t *testing.T) {
	e := newPktEnv(t)
	br := NewBridge(BridgeConfig{})
	// From port 1: learnBatch+1 new stations, all to the first of them,
	// which is unknown until the learning is committed with the
	// learnBatch-th; from that frame on it is on the ingress port itself.
	var fills []func([]byte) int
	var want []Verdict
	for i := range learnBatch + 4 {
		src := mac(byte(10 + min(i, learnBatch)))
		fills = append(fills, frame(mac(10), src))
		if i < learnBatch-1 {
			want = append(want, FloodVerdict)
		} else {
			want = append(want, DropVerdict(drop.NoRoute))
		}
	}
	b := e.batch(packet.L2, 1, 0, fills...)
	br.Run(b)
	wantVerdicts(t, b, want...)
	// From port 2: the same stations over and over, and one unknown.
	b = e.batch(packet.L2, 2, 0, frame(mac(10), mac(2)), frame(mac(10), mac(2)), frame(mac(11), mac(2)), frame(mac(10), mac(2)), frame(mac(3), mac(2)), frame(mac(11), mac(2)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1), RedirectVerdict(1), RedirectVerdict(1), RedirectVerdict(1), FloodVerdict, RedirectVerdict(1))
	b = e.batch(packet.L2, 1, 0, frame(mac(2), mac(10)), frame(mac(2), mac(11)))
	br.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2), RedirectVerdict(2))
}
