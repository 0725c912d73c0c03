package tun

import (
	"fmt"
	"net"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// GRO of UDP: datagrams the kernel sent one by one, given to a GRO device
// in one burst, leave as one USO packet, and the socket behind it
// receives each datagram intact and in order. They are merged whether
// they still ask for their checksum (as a guest with checksum offload
// sends them) or carry it finished (as from a device without offloads,
// which GRO must verify).
func TestGROUDP(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	nsA, nsC := netnstest.New(t), netnstest.New(t)
	nameA, nameC := devName("gra"), devName("grc")
	devA := openDev(t, Config{Name: nameA, NetNS: nsA.Name, Offload: true})
	devC := openDev(t, Config{Name: nameC, NetNS: nsC.Name, Offload: true, GRO: true})
	uso := port.OffloadUSO4 | port.OffloadUSO6
	if devC.Info().Offloads&uso != uso {
		t.Skipf("the kernel refused USO (offloads %v): GRO cannot build UDP GSO packets", devC.Info().Offloads)
	}
	addAddrs(t, nsA, nameA, hostV4, hostV6)
	addAddrs(t, nsC, nameC, peerV4, peerV6)
	const count, size = 20, 1200
	runs := 0
	for _, v6 := range []bool{false, true} {
		for _, finished := range []bool{false, true} {
			t.Run(fmt.Sprintf("ipv6=%v,checksum-finished=%v", v6, finished), func(t *testing.T) {
				peer := peerV4
				if v6 {
					peer = peerV6
				}
				sock := listenUDP(t, nsC, peer)
				dst := sock.LocalAddr().(*net.UDPAddr).AddrPort()
				send := dialUDP(t, nsA, dst)
				payload := pattern(count*size, size)
				for off := 0; off < len(payload); off += size {
					if _, err := send.Write(payload[off : off+size]); err != nil {
						t.Fatal(err)
					}
				}
				burst := receive(t, c, devA.RxQueue(0), count, isUDPTo(packet.L3, dst))
				for _, b := range burst {
					if h := header(t, b); finished {
						if !vnet.FinishChecksum(h, b.Bytes()) {
							t.Fatal("FinishChecksum refused a received datagram")
						}
						b.SetFlags(0)
					}
				}
				if n, err := devC.TxQueue(0).Transmit(c, burst); n != count || err != nil {
					t.Fatalf("Transmit = %d, %v (stats %+v)", n, err, devC.Stats())
				}
				runs++
				expectDatagrams(t, sock, payload, size)
			})
		}
	}
	s := devC.Stats()
	if s.Coalesced != uint64(runs) || s.CoalescedSegs != uint64(runs*count) || s.TxPackets != uint64(runs) || s.TxDrops.Total() != 0 {
		t.Errorf("stats %+v: want %d bursts of %d datagrams each coalesced into one packet", s, runs, count)
	}
}

// GRO of TCP: a stream from a device without offloads (MSS-sized
// segments with finished checksums) through a relay to a GRO device,
// which merges what each burst holds of it into TSO packets; the stream
// arrives intact.
func TestGROTCP(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	nsS, nsR := netnstest.New(t), netnstest.New(t)
	nameS, nameR := devName("grs"), devName("grr")
	devS := openDev(t, Config{Name: nameS, NetNS: nsS.Name})
	devR := openDev(t, Config{Name: nameR, NetNS: nsR.Name, Offload: true, GRO: true})
	addAddrs(t, nsS, nameS, hostV4, hostV6)
	addAddrs(t, nsR, nameR, peerV4, peerV6)
	payload := pattern(4<<20, 1448)
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", v6), func(t *testing.T) {
			peer := peerV4
			if v6 {
				peer = peerV6
			}
			streamThroughRelay(t, c, devS, devR, nsS, nsR, peer, payload, 20*time.Second)
		})
	}
	s := devR.Stats()
	t.Logf("R: %d TSO packets coalesced from %d segments; %d packets written", s.Coalesced, s.CoalescedSegs, s.TxPackets)
	if s.Coalesced == 0 || s.CoalescedSegs < 2*s.Coalesced {
		t.Errorf("no segments were coalesced: %+v", s)
	}
}
