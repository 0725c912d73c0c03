package vswitch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/vnet"
)

// pingOnce reports whether one echo to dst is answered within 300 ms.
func pingOnce(g *guest, dst string) bool {
	_, err := g.ns.Exec("ping", "-c", "1", "-W", "0.3", dst)
	return err == nil
}

// A guest's device bounced down and up: packets toward it while down are
// dropped as DEV_READY, the port stays in the switch, and forwarding
// resumes within a second of the link (and its routes) coming back.
func TestSwitchPortDownUp(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 1)
	ping(t, gs[0], gs[1].v4)
	gs[1].run(t, "ip", "link", "set", gs[1].dev, "down")
	// Toward the down device: neither answered nor a reason to give up.
	for range 3 {
		if pingOnce(gs[0], gs[1].v4) {
			t.Fatal("a ping through a device that is down was answered")
		}
	}
	gs[1].run(t, "ip", "link", "set", gs[1].dev, "up")
	// Down took the routes through the device with it; an operator (or
	// a network manager) puts them back.
	gs[1].run(t, "ip", "route", "replace", gs[0].net4, "dev", gs[1].dev)
	up := time.Now()
	waitFor(t, time.Second, "ping answered after the link came up", func() bool { return pingOnce(gs[0], gs[1].v4) })
	t.Logf("forwarding resumed %v after the link came up", time.Since(up))
	rep := stop()
	if p := rep.Ports[1]; p.Down {
		t.Errorf("bounced port reported down: %+v", p)
	}
	if n := rep.Drops[drop.DevReady]; n < 3 {
		t.Errorf("%d DEV_READY drops, want at least the 3 pings sent while down", n)
	}
}

// A guest MTU raised to 9000 after the switch opened its offload=off
// ports: 9000-byte packets pass both ways, unfragmented.
func TestSwitchMTURaised(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 1, "offload=off", "offload=off")
	ping(t, gs[0], gs[1].v4)
	for _, g := range gs {
		g.run(t, "ip", "link", "set", g.dev, "mtu", "9000")
	}
	jumbo := func() bool {
		_, err := gs[0].ns.Exec("ping", "-c", "1", "-W", "0.5", "-M", "do", "-s", "8972", gs[1].v4)
		return err == nil
	}
	waitFor(t, 5*time.Second, "a 9000-byte ping answered", jumbo)
	rep := stop()
	if n := rep.Drops[drop.PktTooBig]; n != 0 {
		t.Errorf("%d PKT_TOO_BIG drops after the MTU went up", n)
	}
}

// A guest floods a device with a tiny queue: the guest's TX drops, which
// softnet's counters cannot see, are in the report and its JSON.
func TestSwitchReportsDeviceDrops(t *testing.T) {
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 1)
	gs[0].run(t, "ip", "link", "set", gs[0].dev, "txqueuelen", "2")
	const flood = 20000
	sent := uint64(0) // a write that reports an ICMP port unreachable sends nothing
	if err := gs[0].ns.Do(func() error {
		conn, err := net.Dial("udp", net.JoinHostPort(gs[1].v4, "9"))
		if err != nil {
			return err
		}
		defer conn.Close()
		msg := make([]byte, 64)
		for range flood {
			if _, err := conn.Write(msg); err == nil {
				sent++
			} else if !strings.Contains(err.Error(), "refused") {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep := stop()
	k := rep.Devices[0].Kernel
	if k == nil {
		t.Fatalf("no kernel counters for %s: %s", rep.Devices[0].Port, rep.Devices[0].KernelErr)
	}
	t.Logf("guest 0 device: %+v; softnet received %d", *k, rep.Ports[0].RxPackets)
	// Every datagram is the device's packet or its drop, give or take
	// the odd one the kernel lost between the socket and the device.
	if k.TxDropped == 0 || k.TxPackets+k.TxDropped < sent*99/100 {
		t.Errorf("kernel counters %+v for a flood of %d through a queue of 2", *k, sent)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "TX dropped") || !strings.Contains(text.String(), fmt.Sprint(k.TxDropped)) {
		t.Errorf("text report lacks the device's %d TX drops:\n%s", k.TxDropped, text.String())
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(fmt.Sprintf(`"tx_dropped":%d`, k.TxDropped))) {
		t.Errorf("JSON report lacks the device's TX drops: %s", js)
	}
}

// sendRaw writes packets into the guest's device with a packet socket,
// each preceded by a vnet header if vnetHdr.
func sendRaw(t *testing.T, g *guest, vnetHdr bool, pkts ...[]byte) {
	t.Helper()
	if err := g.ns.Do(func() error {
		ifi, err := net.InterfaceByName(g.dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if vnetHdr {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
				return fmt.Errorf("PACKET_VNET_HDR: %w", err)
			}
		}
		addr := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: htons(unix.ETH_P_IP)}
		for _, p := range pkts {
			if err := unix.Sendto(fd, p, 0, addr); err != nil {
				return fmt.Errorf("sendto: %w", err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// An IPv4 packet with a wrong header checksum is dropped as IP_CSUM, not
// forwarded with its checksum "fixed" after the TTL decrement.
func TestSwitchDropsBadIPv4Checksum(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 1)
	ping(t, gs[0], gs[1].v4)
	const bad = 10
	pkt := make([]byte, 64)
	n := packet.PutUDP(pkt, netip.MustParseAddrPort(gs[0].v4+":4000"), netip.MustParseAddrPort(gs[1].v4+":9"), []byte("bad header checksum"))
	pkt = pkt[:n]
	pkt[10] ^= 0x5a
	var pkts [][]byte
	for range bad {
		pkts = append(pkts, pkt)
	}
	sendRaw(t, gs[0], false, pkts...)
	ping(t, gs[0], gs[1].v4)
	rep := stop()
	if got := rep.Ports[0].Drops[drop.IPCsum]; got != bad {
		t.Errorf("%d IP_CSUM drops, want %d (drops %v)", got, bad, rep.Ports[0].Drops)
	}
}

// A guest with offloads forges TSO headers with gso_size 60 on 60000-byte
// packets toward a guest without: each is dropped as GSO_SEG instead of
// becoming a thousand segments, and a third guest's pings stay quick.
func TestSwitchForgedGSOSize(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	stop := startSwitch(t, gs, 1, "", "offload=off", "")
	ping(t, gs[0], gs[1].v4)
	const forged, payload = 300, 60000
	src, dst := netip.MustParseAddr(gs[0].v4), netip.MustParseAddr(gs[1].v4)
	frame := make([]byte, vnet.HeaderLen+packet.IPv4HeaderLen+packet.TCPHeaderLen+payload)
	vnet.Header{
		Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 60,
		HdrLen: packet.IPv4HeaderLen + packet.TCPHeaderLen, CsumStart: packet.IPv4HeaderLen, CsumOffset: 16,
	}.Encode(frame)
	ip := frame[vnet.HeaderLen:]
	off := packet.PutIPv4(ip, src, dst, packet.ProtoTCP, 64, packet.TCPHeaderLen+payload)
	tcp := ip[off:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 9)
	tcp[12], tcp[13] = packet.TCPHeaderLen/4<<4, 0x10
	binary.BigEndian.PutUint16(tcp[16:], uint16(packet.PseudoHeaderChecksum(packet.ProtoTCP, src, dst, packet.TCPHeaderLen+payload)))
	var pkts [][]byte
	for range forged {
		pkts = append(pkts, frame)
	}
	sendRaw(t, gs[0], true, pkts...)
	out := gs[2].run(t, "ping", "-c", "5", "-i", "0.2", "-W", "2", gs[0].v4)
	t.Logf("%s", out[strings.LastIndex(out, "rtt"):])
	rep := stop()
	dev := rep.Devices[1]
	if dev.TxDrops[drop.GsoSeg] != forged || dev.Segments != 0 {
		t.Errorf("%s: %d GSO_SEG drops and %d segments written, want %d and 0", dev.Port, dev.TxDrops[drop.GsoSeg], dev.Segments, forged)
	}
}
