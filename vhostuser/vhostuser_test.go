//go:build linux

package vhostuser

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// testFrame returns an Ethernet frame of n bytes whose payload bytes
// count from seed.
func testFrame(n int, seed byte) []byte {
	f := make([]byte, n)
	copy(f, []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x88, 0xb5})
	for i := packet.EthernetHeaderLen; i < n; i++ {
		f[i] = seed + byte(i)
	}
	return f
}

func TestGuestToPortAndBack(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)

	// Guest to port: three frames, up to a full 1500-byte MTU's.
	sent := [][]byte{testFrame(60, 1), testFrame(1514, 2), testFrame(100, 3)}
	for i, fr := range sent {
		f.transmit(i, fr)
	}
	got := receiveAll(t, p, c, len(sent))
	if len(got) != len(sent) {
		t.Fatalf("received %d packets, want %d", len(got), len(sent))
	}
	for i, b := range got {
		if !bytes.Equal(b.Bytes(), sent[i]) {
			t.Errorf("packet %d: got %d bytes, want %x...", i, b.Len(), sent[i][:20])
		}
		if b.Flags() != 0 {
			t.Errorf("packet %d: flags %#x, want none", i, b.Flags())
		}
	}
	c.ConsumeBulk(got)
	ids, lens := f.used(1)
	if len(ids) != 3 || ids[0] != 0 || ids[2] != 2 || lens[0] != 0 {
		t.Errorf("used entries of the guest's TX ring: ids %v lens %v, want 0 1 2 with length 0", ids, lens)
	}

	// Port to guest: one frame in one buffer, one merged over four.
	f.postRx(0, 8, 256)
	waitRunning(t, p, 0)
	want := [][]byte{testFrame(200, 7), testFrame(1000, 9)}
	out := []*buffer.Buf{bufWith(t, c, want[0]), bufWith(t, c, want[1])}
	if n, err := p.TxQueue(0).Transmit(c, out); n != 2 || err != nil {
		t.Fatalf("Transmit = %d, %v; want 2, nil", n, err)
	}
	hdrs, frames := f.received()
	if len(frames) != 2 {
		t.Fatalf("guest received %d packets, want 2", len(frames))
	}
	for i := range frames {
		if !bytes.Equal(frames[i], want[i]) {
			t.Errorf("guest packet %d: %d bytes, want %d", i, len(frames[i]), len(want[i]))
		}
	}
	if nb := binary.LittleEndian.Uint16(hdrs[1][vnet.HeaderLen:]); nb != 4 {
		t.Errorf("num_buffers of a 1000-byte frame in 256-byte buffers: %d, want 4", nb)
	}
	if binary.LittleEndian.Uint16(hdrs[0][vnet.HeaderLen:]) != 1 {
		t.Errorf("num_buffers of a small frame: want 1")
	}
	// Three buffers are left; a frame that needs five does not fit and
	// consumes none of them.
	if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(1200, 1))}); n != 0 {
		t.Errorf("a frame larger than the guest's buffers was sent")
	}
	s := p.Stats()
	if s.RxPackets != 3 || s.TxPackets != 2 || s.TxDrops[drop.FullRing] != 1 {
		t.Errorf("stats %+v: want 3 received, 2 sent, 1 FULL_RING", s)
	}
	// Two more buffers, five in all: the frame fits now. The port last
	// saw three waiting; it must read the guest's index again.
	f.postRx(8, 2, 256)
	big := testFrame(1200, 4)
	if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, big)}); n != 1 {
		t.Fatalf("a frame for five buffers, with five posted: %d sent, want 1 (stats %+v)", n, p.Stats())
	}
	if _, frames := f.received(); len(frames) != 1 || !bytes.Equal(frames[0], big) {
		t.Errorf("guest received %d frames, want the 1200-byte one", len(frames))
	}
	s = p.Stats()
	if s.TxPackets != 3 {
		t.Errorf("stats %+v: want 3 sent", s)
	}
	if s.Features != featVersion1|featMrgRxbuf|featProtocol {
		t.Errorf("features %#x, want VERSION_1, MRG_RXBUF and PROTOCOL_FEATURES", s.Features)
	}
	if !s.Connected || s.Connects != 1 || s.RunningRings != 2 {
		t.Errorf("stats: connected %v after %d connects, %d rings running; want true after 1, 2 rings", s.Connected, s.Connects, s.RunningRings)
	}
}

func bufWith(t *testing.T, c *buffer.Cache, data []byte) *buffer.Buf {
	t.Helper()
	b, err := c.Get(0)
	if err != nil {
		t.Fatal(err)
	}
	b.SetData(b.Headroom(), len(data))
	copy(b.Bytes(), data)
	return b
}

// A guest without MRG_RXBUF and VERSION_1 has a 10-byte header and a
// packet must fit one buffer.
func TestLegacyGuest(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(0)
	waitRunning(t, p, 1)
	f.transmit(0, testFrame(80, 5))
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 || !bytes.Equal(got[0].Bytes(), testFrame(80, 5)) {
		t.Fatalf("legacy guest's frame not received intact")
	}
	c.ConsumeBulk(got)
	f.postRx(0, 2, 512)
	waitRunning(t, p, 0)
	if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(1000, 1))}); n != 0 {
		t.Errorf("a frame larger than one buffer was sent to a guest that cannot merge")
	}
	if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(400, 1))}); n != 1 {
		t.Errorf("a frame that fits was not sent")
	}
	_, frames := f.received()
	if len(frames) != 1 || !bytes.Equal(frames[0], testFrame(400, 1)) {
		t.Errorf("guest received %d frames, want the 400-byte one", len(frames))
	}
	if s := p.Stats(); s.TxDrops[drop.PktTooBig] != 1 {
		t.Errorf("TX drops %v, want one PKT_TOO_BIG", s.TxDrops)
	}
}

// A hostile guest: chains that loop, point outside its memory, name a
// descriptor past the ring, or are longer than the ring. Each is a counted
// drop, and the ring goes on working.
func TestHostileChains(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	good := func(slot int) {
		f.transmit(slot, testFrame(64, byte(slot)))
		got := receiveAll(t, p, c, 1)
		if len(got) != 1 {
			t.Fatalf("a good packet after hostile ones was not received")
		}
		c.ConsumeBulk(got)
	}
	good(0)
	buf := guestBase + uint64(f.bufOff(1, 10))
	cases := []struct {
		name  string
		setup func() uint16 // returns the head
	}{
		{"loop", func() uint16 {
			f.setDesc(1, 10, buf, 40, descNext, 11)
			f.setDesc(1, 11, buf, 40, descNext, 10)
			return 10
		}},
		{"outside memory", func() uint16 {
			f.setDesc(1, 12, guestBase+memSize-8, 64, 0, 0)
			return 12
		}},
		{"below memory", func() uint16 {
			f.setDesc(1, 13, 0x1000, 64, 0, 0)
			return 13
		}},
		{"wrapping address", func() uint16 {
			f.setDesc(1, 14, ^uint64(0)-4, 64, 0, 0)
			return 14
		}},
		{"next past the ring", func() uint16 {
			f.setDesc(1, 15, buf, 40, descNext, testNum+3)
			return 15
		}},
		{"head past the ring", func() uint16 { return testNum + 1 }},
		{"writable buffer on transmit", func() uint16 {
			f.setDesc(1, 16, buf, 64, descWrite, 0)
			return 16
		}},
		{"indirect", func() uint16 {
			f.setDesc(1, 17, buf, 64, descIndirect, 0)
			return 17
		}},
		{"too long", func() uint16 {
			for i := range testNum {
				f.setDesc(1, i, buf, 1, descNext, uint16((i+1)%testNum))
			}
			return 0
		}},
	}
	for i, tc := range cases {
		before := p.Stats()
		f.offer(1, tc.setup())
		deadline := time.Now().Add(10 * time.Second)
		for p.Stats().BadChains == before.BadChains && time.Now().Before(deadline) {
			bufs := make([]*buffer.Buf, 8)
			n, err := p.RxQueue(0).Receive(c, bufs)
			if err != nil || n != 0 {
				t.Fatalf("%s: Receive = %d, %v; want 0, nil", tc.name, n, err)
			}
		}
		after := p.Stats()
		if after.BadChains != before.BadChains+1 || after.RxDrops.Total() != before.RxDrops.Total()+1 {
			t.Errorf("%s: bad chains %d→%d, drops %d→%d; want one more each", tc.name, before.BadChains, after.BadChains, before.RxDrops.Total(), after.RxDrops.Total())
		}
		good(20 + i)
	}
	// An available index more than a ring ahead: the ring is given up
	// until the front-end restarts it.
	f.setAvailIdx(1, f.availIdx[1]+testNum+1)
	bufs := make([]*buffer.Buf, 8)
	if n, _ := p.RxQueue(0).Receive(c, bufs); n != 0 {
		t.Fatal("received from a corrupt ring")
	}
	if s := p.Stats(); s.BrokenRings != 1 {
		t.Fatalf("broken rings %d, want 1", s.BrokenRings)
	}
	// Restart: GET_VRING_BASE stops it, and the front-end starts it
	// again from its own index.
	st := f.get(reqGetVringBase, statePayload(vringState{1, 0}))
	if binary.LittleEndian.Uint32(st) != 1 {
		t.Fatalf("GET_VRING_BASE replied for ring %d", binary.LittleEndian.Uint32(st))
	}
	f.setAvailIdx(1, f.availIdx[1])
	f.startRing(1, f.availIdx[1])
	waitRunning(t, p, 1)
	good(40)
}

// Arm resets the kick, asks for kicks and looks at the ring again;
// Disarm stops the kicks. The queue's descriptor is readable after a kick.
func TestArmAndKick(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	q := p.RxQueue(0)
	if f.usedFlags(1)&usedNoNotify == 0 {
		t.Error("a polled ring asks for kicks")
	}
	if q.Arm() {
		t.Fatal("Arm reports packets on an empty ring")
	}
	if f.usedFlags(1)&usedNoNotify != 0 {
		t.Fatal("an armed ring does not ask for kicks")
	}
	if readable(q.FD()) {
		t.Fatal("the queue's descriptor is readable with nothing to do")
	}
	// The guest adds a packet and kicks, as it must after reading the
	// flags.
	f.transmit(0, testFrame(64, 1))
	signalFD(f.kick[1])
	if !readable(q.FD()) {
		t.Fatal("a kick did not make the queue's descriptor readable")
	}
	q.Disarm()
	if f.usedFlags(1)&usedNoNotify == 0 {
		t.Error("a disarmed ring asks for kicks")
	}
	// A packet added before Arm is seen by Arm itself.
	if !q.Arm() {
		t.Error("Arm does not see a pending packet")
	}
	q.Disarm()
	got := receiveAll(t, p, c, 1)
	c.ConsumeBulk(got)
}

func readable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(pfd, 1000)
	return n == 1
}

// Partial checksums and TSO from a guest that negotiated them are marked
// for the datapath; toward a guest without them a marked packet has its
// checksum finished in software.
func TestOffloads(t *testing.T) {
	p, _, c := testPort(t, Config{Offload: true})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf | featCsum | featHostTSO4)
	waitRunning(t, p, 1)
	udp := udpFrame(t)
	h := vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}
	off := f.bufOff(1, 0)
	clear(f.mem[off : off+hdrMrg])
	h.Encode(f.mem[off:])
	copy(f.mem[off+hdrMrg:], udp)
	f.setDesc(1, 0, guestBase+uint64(off), uint32(hdrMrg+len(udp)), 0, 0)
	f.offer(1, 0)
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 || got[0].Flags() != tun.FlagVnetHdr {
		t.Fatalf("a packet with a partial checksum was not received marked")
	}
	// Back to the guest, which did not negotiate GUEST_CSUM: the
	// checksum is finished here.
	f.postRx(0, 1, 2048)
	waitRunning(t, p, 0)
	if n, _ := p.TxQueue(0).Transmit(c, got); n != 1 {
		t.Fatalf("the marked packet was not sent")
	}
	hdrs, frames := f.received()
	if len(frames) != 1 {
		t.Fatal("guest received nothing")
	}
	if hh, _ := vnet.Decode(hdrs[0]); hh.Flags != 0 {
		t.Errorf("header flags %#x toward a guest without GUEST_CSUM", hh.Flags)
	}
	if packet.Checksum(frames[0][34:], pseudoSum(frames[0])) != 0 {
		t.Errorf("UDP checksum not finished: % x", frames[0][34:42])
	}
	// A guest that did not negotiate TSO6 sending it: a drop.
	h = vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv6, GSOSize: 1000, CsumStart: 54, CsumOffset: 16}
	h.Encode(f.mem[off:])
	f.setDesc(1, 1, guestBase+uint64(off), uint32(hdrMrg+len(udp)), 0, 0)
	f.offer(1, 1)
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().RxDrops[drop.DevHdr] == 0 && time.Now().Before(deadline) {
		bufs := make([]*buffer.Buf, 4)
		if n, _ := p.RxQueue(0).Receive(c, bufs); n != 0 {
			t.Fatal("a TSO6 packet from a guest without HOST_TSO6 was received")
		}
	}
	if p.Stats().RxDrops[drop.DevHdr] != 1 {
		t.Error("no DEV_HDR drop for an offload the guest did not negotiate")
	}
}

// udpFrame is an IPv4 UDP frame whose checksum field holds the
// pseudo-header sum, as a sender with checksum offload leaves it.
func udpFrame(t *testing.T) []byte {
	t.Helper()
	f := make([]byte, 14+20+8+32)
	copy(f, []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00})
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	copy(ip[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip[:20], 0))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp, 5000)
	binary.BigEndian.PutUint16(udp[2:], 6000)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	for i := 8; i < len(udp); i++ {
		udp[i] = byte(i)
	}
	binary.BigEndian.PutUint16(udp[6:], ^packet.Checksum(nil, pseudoSum(f)))
	return f
}

// pseudoSum is the folded IPv4 pseudo-header sum of an Ethernet frame's
// UDP packet, not complemented.
func pseudoSum(f []byte) uint32 {
	ip := f[14:]
	var s uint32
	for i := 12; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	s += 17 + uint32(len(ip)-20)
	return s
}

// A front-end that sends what the port cannot take: a refused request
// it asked an acknowledgement for is answered as refused and the session
// goes on; a malformed message ends the session, and the port serves the
// next front-end.
func TestRefusedMessages(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	for _, tc := range []struct {
		name    string
		req     uint32
		payload []byte
	}{
		{"queue size not a power of two", reqSetVringNum, statePayload(vringState{1, 3})},
		{"queue size too large", reqSetVringNum, statePayload(vringState{1, 65536})},
		{"ring past the port's", reqSetVringNum, statePayload(vringState{7, 256})},
		{"base of more than 16 bits", reqSetVringBase, statePayload(vringState{1, 1 << 16})},
		{"kick without a descriptor", reqSetVringKick, u64Payload(1)},
		{"unknown request", 200, nil},
	} {
		if err := f.send(tc.req, flagNeedReply, tc.payload); err != nil {
			t.Fatal(err)
		}
		r, err := f.reply(tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(r) != 8 || binary.LittleEndian.Uint64(r) == 0 {
			t.Errorf("%s: acknowledged as done (%x)", tc.name, r)
		}
	}
	if s := p.Stats(); s.Refused != 6 || !s.Connected {
		t.Errorf("refused %d, connected %v; want 6 and still connected", s.Refused, s.Connected)
	}
	// The rings still run: the refused requests changed nothing.
	f.transmit(0, testFrame(64, 1))
	if got := receiveAll(t, p, c, 1); len(got) != 1 {
		t.Fatal("no packet after refused requests")
	} else {
		c.ConsumeBulk(got)
	}
	// A memory table of no regions, without asking for a reply: the
	// session ends.
	if err := f.send(reqSetMemTable, 0, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	_ = f.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := f.conn.Read(b[:]); n != 0 || err == nil {
		t.Fatalf("the session went on after a malformed message (%d, %v)", n, err)
	}
	waitDisconnected(t, p)
	// The next front-end is served, from a clean state.
	g := newTestFrontend(t, p.Socket())
	g.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	g.transmit(0, testFrame(64, 2))
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 || !bytes.Equal(got[0].Bytes(), testFrame(64, 2)) {
		t.Fatal("the second front-end's packet was not received")
	}
	c.ConsumeBulk(got)
	if s := p.Stats(); s.Connects != 2 {
		t.Errorf("connects %d, want 2", s.Connects)
	}
}

func waitDisconnected(t *testing.T, p *Port) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the port still serves a front-end that went away")
		}
		time.Sleep(time.Millisecond)
	}
}

// A front-end that goes away and comes back (a VM that reboots): the
// rings stop with it, TX to the guest drops as DEV_READY meanwhile, and
// traffic resumes with the new one.
func TestReconnect(t *testing.T) {
	p, _, c := testPort(t, Config{})
	for round := range 3 {
		f := newTestFrontend(t, p.Socket())
		f.setup(featVersion1 | featMrgRxbuf)
		waitRunning(t, p, 1)
		f.transmit(0, testFrame(64, byte(round)))
		got := receiveAll(t, p, c, 1)
		if len(got) != 1 || !bytes.Equal(got[0].Bytes(), testFrame(64, byte(round))) {
			t.Fatalf("round %d: packet not received", round)
		}
		c.ConsumeBulk(got)
		f.conn.Close()
		waitDisconnected(t, p)
		if n := p.Stats().RunningRings; n != 0 {
			t.Errorf("%d rings running without a front-end", n)
		}
		before := p.Stats().TxDrops[drop.DevReady]
		if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(64, 1))}); n != 0 {
			t.Fatal("sent to a guest that is gone")
		}
		if p.Stats().TxDrops[drop.DevReady] != before+1 {
			t.Error("a packet to a guest that is gone is not a DEV_READY drop")
		}
	}
}

// A socket another port listens on is refused; one left behind by a
// back-end that is gone is replaced.
func TestListenSocketInUse(t *testing.T) {
	p, _, _ := testPort(t, Config{})
	if q, err := Listen(Config{Name: "other", Socket: p.Socket(), Log: quiet}); err == nil {
		q.CloseInto(nil)
		t.Fatal("a second port listens on a socket in use")
	}
	stale := filepath.Join(t.TempDir(), "stale.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: stale}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd) // bound, never listening: the file stays, stale
	q, err := Listen(Config{Name: "again", Socket: stale, Log: quiet})
	if err != nil {
		t.Fatalf("a stale socket file was not replaced: %v", err)
	}
	q.CloseInto(nil)
}

// A port in client mode connects to the front-end's socket, and again
// after the front-end went away and came back (a VM's QEMU that
// restarts).
func TestClientMode(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qemu.sock")
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The front-end is not there yet: the port waits for it.
	p, err := Listen(Config{Name: "vm", Socket: sock, Client: true, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.CloseInto(c); err != nil {
			t.Error(err)
		}
		c.Close()
		if err := pool.Close(); err != nil {
			t.Errorf("leak check: %v", err)
		}
	})
	for round := range 2 {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		f := newTestFrontendServer(t, ln)
		f.setup(featVersion1 | featMrgRxbuf)
		waitRunning(t, p, 1)
		f.transmit(0, testFrame(64, byte(round)))
		got := receiveAll(t, p, c, 1)
		if len(got) != 1 || !bytes.Equal(got[0].Bytes(), testFrame(64, byte(round))) {
			t.Fatalf("round %d: packet not received", round)
		}
		c.ConsumeBulk(got)
		// The front-end goes away, its socket with it.
		f.conn.Close()
		ln.Close()
		waitDisconnected(t, p)
	}
	if s := p.Stats(); s.Connects != 2 {
		t.Errorf("connects %d, want 2", s.Connects)
	}
}

// With VIRTIO_RING_F_EVENT_IDX the guest is called only when the used
// index passes the used_event it wrote, and Arm asks for a kick by
// writing avail_event.
func TestEventIdx(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf | featEventIdx)
	waitRunning(t, p, 0)
	waitRunning(t, p, 1)
	// used_event of ring 0: call once entry 2 is used.
	binary.LittleEndian.PutUint16(f.mem[f.availOff(0)+4+2*testNum:], 2)
	f.postRx(0, 8, 2048)
	called := func() bool {
		var b [8]byte
		n, _ := unix.Read(f.call[0], b[:])
		return n == 8
	}
	for i, want := range []bool{false, false, true, false} {
		if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(64, byte(i)))}); n != 1 {
			t.Fatalf("packet %d not sent", i)
		}
		if got := called(); got != want {
			t.Errorf("after used entry %d: called %v, want %v", i, got, want)
		}
	}
	if _, frames := f.received(); len(frames) != 4 {
		t.Errorf("guest received %d packets, want 4", len(frames))
	}
	// Kicks: Arm writes avail_event, the entry whose publication the
	// guest kicks for: the next one.
	f.transmit(0, testFrame(64, 9))
	got := receiveAll(t, p, c, 1)
	c.ConsumeBulk(got)
	q := p.RxQueue(0)
	if q.Arm() {
		t.Fatal("Arm reports packets on an empty ring")
	}
	if ev := binary.LittleEndian.Uint16(f.mem[f.usedOff(1)+4+8*testNum:]); ev != f.availIdx[1] {
		t.Errorf("avail_event %d after Arm, want %d (the next entry)", ev, f.availIdx[1])
	}
	q.Disarm()
}

// A memory table whose region runs past the end of its file is refused:
// touching that memory would fault and take the switch down.
func TestMemTablePastTheFile(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	m := binary.LittleEndian.AppendUint32(nil, 1)
	m = binary.LittleEndian.AppendUint32(m, 0)
	m = binary.LittleEndian.AppendUint64(m, guestBase)
	m = binary.LittleEndian.AppendUint64(m, memSize*4)
	m = binary.LittleEndian.AppendUint64(m, userBase)
	m = binary.LittleEndian.AppendUint64(m, 0)
	if err := f.send(reqSetMemTable, flagNeedReply, m, f.memFD); err != nil {
		t.Fatal(err)
	}
	r, err := f.reply(reqSetMemTable)
	if err != nil || len(r) != 8 || binary.LittleEndian.Uint64(r) == 0 {
		t.Fatalf("a region past its file's end was accepted (%x, %v)", r, err)
	}
	// The rings run on the memory table they had.
	f.transmit(0, testFrame(64, 3))
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 {
		t.Fatal("no packet after a refused memory table")
	}
	c.ConsumeBulk(got)
}

// A front-end that shrinks the file of the guest's memory under the
// mapping makes touching it fault: the burst is recovered, what it held
// is freed, and the rings are given up; the switch lives.
func TestGuestMemoryShrinks(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 0)
	waitRunning(t, p, 1)
	f.postRx(0, 4, 2048)
	f.transmit(0, testFrame(64, 1))
	// The rings stay inside the file; the buffers, from 1 MiB on, do not.
	if err := unix.Ftruncate(f.memFD, bufBase); err != nil {
		t.Fatal(err)
	}
	bufs := make([]*buffer.Buf, 8)
	if n, err := p.RxQueue(0).Receive(c, bufs); n != 0 || err != nil {
		t.Fatalf("Receive from memory that faults = %d, %v", n, err)
	}
	if n, err := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(64, 2)), bufWith(t, c, testFrame(64, 3))}); n != 0 || err != nil {
		t.Fatalf("Transmit into memory that faults = %d, %v", n, err)
	}
	s := p.Stats()
	if s.BrokenRings != 2 || s.RxDrops[drop.DevHdr] != 1 || s.TxDrops[drop.DevReady] != 2 {
		t.Errorf("stats %+v: want both rings given up, one RX drop, two TX drops", s)
	}
}

// The data path allocates nothing per packet, both ways.
func TestNoAllocs(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf | featEventIdx)
	waitRunning(t, p, 0)
	waitRunning(t, p, 1)
	frame := testFrame(200, 1)
	bufs := make([]*buffer.Buf, 8)
	out := make([]*buffer.Buf, 1)
	slot := 0
	rx, tx := p.RxQueue(0), p.TxQueue(0)
	round := func() {
		f.transmit(slot, frame)
		f.postRx(slot, 1, 2048)
		slot = (slot + 1) % testNum
		n, _ := rx.Receive(c, bufs)
		if n != 1 {
			t.Fatalf("received %d", n)
		}
		out[0] = bufs[0]
		if sent, _ := tx.Transmit(c, out); sent != 1 {
			t.Fatalf("sent %d", sent)
		}
		rx.Arm()
		rx.Disarm()
	}
	round() // warm the cache
	if allocs := testing.AllocsPerRun(500, round); allocs != 0 {
		t.Errorf("%v allocations per packet received and sent", allocs)
	}
}

// TestHeaderAcrossBuffers: a guest whose receive buffers are smaller
// than the virtio-net header gets it spread over them, and the frame
// after it.
func TestHeaderAcrossBuffers(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 0)
	for i := range 16 { // what the guest's buffers held before
		off := f.bufOff(0, i)
		for k := range 8 {
			f.mem[off+k] = 0xff
		}
	}
	f.postRx(0, 16, 8)
	want := testFrame(60, 5)
	if n, err := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, want)}); n != 1 || err != nil {
		t.Fatalf("Transmit = %d, %v; want 1, nil", n, err)
	}
	// The used entries in order, each buffer's bytes: the header, then
	// the frame.
	var got []byte
	ids, lens := f.used(0)
	for i, id := range ids {
		off := f.bufOff(0, int(id))
		got = append(got, f.mem[off:off+int(lens[i])]...)
	}
	if len(ids) != 9 || len(got) != hdrMrg+len(want) {
		t.Fatalf("%d buffers used with %d bytes, want 9 with %d", len(ids), len(got), hdrMrg+len(want))
	}
	if h, _ := vnet.Decode(got); h != (vnet.Header{}) {
		t.Errorf("header %+v, want zero", h)
	}
	if nb := binary.LittleEndian.Uint16(got[vnet.HeaderLen:]); nb != 9 {
		t.Errorf("num_buffers %d for 72 bytes in 8-byte buffers, want 9", nb)
	}
	if !bytes.Equal(got[hdrMrg:], want) {
		t.Errorf("frame % x, want % x", got[hdrMrg:], want)
	}
}

// The socket has the mode and group Config.Perm gives (0660 by default
// with a group, 0600 without), and a mode that would let anyone in, or
// a Perm in client mode, is refused.
func TestSocketPerm(t *testing.T) {
	for _, tc := range []struct {
		perm *SocketPerm
		mode os.FileMode
		gid  int
	}{
		{nil, 0o600, os.Getegid()},
		{&SocketPerm{UID: -1, GID: os.Getegid()}, 0o660, os.Getegid()},
		{&SocketPerm{UID: os.Geteuid(), GID: -1, Mode: 0o640}, 0o640, os.Getegid()},
	} {
		sock := filepath.Join(t.TempDir(), "vm.sock")
		p, err := Listen(Config{Name: "perm", Socket: sock, Perm: tc.perm, Log: quiet})
		if err != nil {
			t.Fatalf("%v: %v", tc.perm, err)
		}
		fi, err := os.Lstat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != tc.mode || int(st.Gid) != tc.gid {
			t.Errorf("%v: socket %v of group %d, want mode %v and group %d", tc.perm, fi.Mode(), st.Gid, tc.mode, tc.gid)
		}
		p.CloseInto(nil)
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: socket left after close: %v", tc.perm, err)
		}
	}
	for _, cfg := range []Config{
		{Name: "x", Socket: "/a", Perm: &SocketPerm{UID: -1, GID: -1, Mode: 0o662}},
		{Name: "x", Socket: "/a", Perm: &SocketPerm{UID: -1, GID: -1, Mode: os.ModeSetuid | 0o600}},
		{Name: "x", Socket: "/a", Perm: &SocketPerm{UID: -2, GID: -1}},
		{Name: "x", Socket: "/a", Client: true, Perm: &SocketPerm{UID: -1, GID: 0}},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted it", cfg)
		}
	}
}

// With VIRTIO_F_IN_ORDER a burst of packets from the guest completes
// with one used entry, the burst's last, whose id stands for the chains
// before it; every chain is still walked and checked (a bad one among
// them is refused and counted, and completed with the others). Toward
// the guest every used entry is written: the guest needs each length.
func TestInOrder(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf | featInOrder)
	waitRunning(t, p, 1)
	const unwritten = 0xdeadbeef
	for i := range 4 {
		binary.LittleEndian.PutUint32(f.mem[f.usedOff(1)+4+8*i:], unwritten)
	}
	f.transmit(0, testFrame(60, 1))
	f.setDesc(1, 1, guestBase+memSize, 64, 0, 0) // outside guest memory
	f.offer(1, 1)
	f.transmit(2, testFrame(100, 3))
	got := receiveAll(t, p, c, 2)
	if len(got) != 2 || got[0].Len() != 60 || got[1].Len() != 100 {
		t.Fatalf("received %d packets, want the 60- and 100-byte ones", len(got))
	}
	c.ConsumeBulk(got)
	if idx := f.usedIdx(1); idx != 3 {
		t.Fatalf("used index %d after three chains, want 3", idx)
	}
	for i, want := range []uint32{unwritten, unwritten, 2} {
		if id := binary.LittleEndian.Uint32(f.mem[f.usedOff(1)+4+8*i:]); id != want {
			t.Errorf("used entry %d: id %#x, want %#x", i, id, want)
		}
	}
	s := p.Stats()
	if s.Features&featInOrder == 0 || s.BadChains != 1 || s.RxPackets != 2 {
		t.Errorf("stats %+v: want IN_ORDER negotiated, 1 bad chain, 2 received", s)
	}

	f.postRx(0, 4, 2048)
	waitRunning(t, p, 0)
	want := []int{64, 200}
	out := []*buffer.Buf{bufWith(t, c, testFrame(want[0], 5)), bufWith(t, c, testFrame(want[1], 6))}
	if n, err := p.TxQueue(0).Transmit(c, out); n != 2 || err != nil {
		t.Fatalf("Transmit = %d, %v; want 2, nil", n, err)
	}
	ids, lens := f.used(0)
	if len(ids) != 2 || ids[0] != 0 || ids[1] != 1 || int(lens[0]) != hdrMrg+want[0] || int(lens[1]) != hdrMrg+want[1] {
		t.Errorf("used entries toward the guest: ids %v lens %v, want 0 1 with their lengths", ids, lens)
	}
}

// A transmit burst that faults part way keeps what it sent: the packets
// delivered before the fault count as sent and are freed as consumed, the
// rest drop as DEV_READY, and no buffer is lost (the pool's leak check).
func TestTransmitFaultsMidBurst(t *testing.T) {
	p, pool, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 0)
	f.postRx(0, 4, bufSize)
	// Buffers 0 and 1 stay inside the file; 2 and 3 do not.
	if err := unix.Ftruncate(f.memFD, int64(f.bufOff(0, 2))); err != nil {
		t.Fatal(err)
	}
	before := pool.Stats()
	out := []*buffer.Buf{bufWith(t, c, testFrame(64, 1)), bufWith(t, c, testFrame(64, 2)), bufWith(t, c, testFrame(64, 3)), bufWith(t, c, testFrame(64, 4))}
	if n, err := p.TxQueue(0).Transmit(c, out); n != 2 || err != nil {
		t.Fatalf("Transmit = %d, %v; want the 2 packets before the fault, nil", n, err)
	}
	s := p.Stats()
	if s.TxPackets != 2 || s.TxDrops[drop.DevReady] != 2 || s.BrokenRings != 1 {
		t.Errorf("stats %+v: want 2 sent, 2 DEV_READY drops, the ring given up", s)
	}
	c.Publish()
	if after := pool.Stats(); after.Consumed-before.Consumed != 2 {
		t.Errorf("%d buffers freed as consumed, want the 2 sent", after.Consumed-before.Consumed)
	}
}
