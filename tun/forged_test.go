package tun

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/vnet"
)

// sendForgedGSO sends, through a packet socket with PACKET_VNET_HDR on dev
// in ns (what a guest can do), one TCP/IPv4 packet of payload bytes with
// a TSO header of the given gso_size, which the kernel passes to the
// device whole.
func sendForgedGSO(t *testing.T, ns *netnstest.NS, dev string, gsoSize uint16, payload int) {
	t.Helper()
	const l4 = packet.TCPHeaderLen
	frame := make([]byte, vnet.HeaderLen+packet.IPv4HeaderLen+l4+payload)
	vnet.Header{
		Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: gsoSize,
		HdrLen: packet.IPv4HeaderLen + l4, CsumStart: packet.IPv4HeaderLen, CsumOffset: 16,
	}.Encode(frame)
	ip := frame[vnet.HeaderLen:]
	off := packet.PutIPv4(ip, hostV4, peerV4, packet.ProtoTCP, 64, l4+payload)
	tcp := ip[off:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 9)
	tcp[12] = l4 / 4 << 4
	tcp[13] = 0x10 // ACK
	binary.BigEndian.PutUint16(tcp[16:], uint16(packet.PseudoHeaderChecksum(packet.ProtoTCP, hostV4, peerV4, l4+payload)))
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_IP))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return fmt.Errorf("PACKET_VNET_HDR: %w", err)
		}
		if err := unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: uint16(proto)}); err != nil {
			return fmt.Errorf("sendto: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send forged GSO packet: %v", err)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// A guest's forged TSO header, 60000 bytes in segments of 60 (1000
// segments), reaches a port without offloads: it is dropped as GSO_SEG
// before any segment is made. A gso_size below the kernel's minimum is
// refused on receive as DEV_HDR.
func TestForgedGSOSize(t *testing.T) {
	r := newOffloadRig(t)
	sendForgedGSO(t, r.nsA, r.devA.Info().Name, 60, 60000)
	isTCP := func(b *buffer.Buf) bool {
		var h packet.Headers
		ok, _ := packet.Parse(b.Bytes(), packet.L3, &h)
		return ok && h.IPProto == packet.ProtoTCP && h.DstIP == peerV4
	}
	b := receive(t, r.cache, r.devA.RxQueue(0), 1, isTCP)[0]
	if h := header(t, b); h.GSOSize != 60 || !h.IsGSO() {
		t.Fatalf("received header %+v, want TSO with gso_size 60", h)
	}
	if n, err := r.devB.TxQueue(0).Transmit(r.cache, []*buffer.Buf{b}); n != 0 || err != nil {
		t.Fatalf("Transmit of the forged packet = %d, %v; want 0, nil", n, err)
	}
	if s := r.devB.Stats(); s.TxDrops[drop.GsoSeg] != 1 || s.Segments != 0 || s.TxPackets != 0 {
		t.Errorf("B: %+v, want one GSO_SEG drop and no segment written", s)
	}

	sendForgedGSO(t, r.nsA, r.devA.Info().Name, 7, 700)
	bufs := make([]*buffer.Buf, 16)
	deadline := time.Now().Add(testTimeout)
	for r.devA.Stats().RxDrops[drop.DevHdr] == 0 && time.Now().Before(deadline) {
		n, err := r.devA.RxQueue(0).Receive(r.cache, bufs)
		r.cache.ConsumeBulk(bufs[:n])
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if s := r.devA.Stats(); s.RxDrops[drop.DevHdr] != 1 {
		t.Errorf("A: rx drops %v, want one DEV_HDR for gso_size 7", s.RxDrops)
	}
}
