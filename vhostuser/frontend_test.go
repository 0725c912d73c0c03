//go:build linux

package vhostuser

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/vnet"
)

// testFrontend is a vhost-user front-end and virtio-net driver written
// for the tests: it shares a memfd as the guest's memory, lays out the
// rings of one queue pair in it, and plays the guest's part of the split
// ring by hand, so that tests can also play a hostile guest.
type testFrontend struct {
	t     testing.TB
	conn  *net.UnixConn
	memFD int
	mem   []byte
	num   uint16
	// kick and call are the eventfds of the rings, the front-end's ends:
	// even rings go to the guest, odd ones come from it.
	kick, call [testRings]int
	availIdx   [testRings]uint16 // the next available entry the guest fills
	lastUsed   [testRings]uint16 // the next used entry the guest reads
	hdrLen     int
}

// The guest's memory: physical addresses from guestBase, the
// front-end's own addresses from userBase (different, so that a mix-up
// of the two fails).
// quiet is the tests' ports' logger: what they log is checked through
// their counters.
var quiet = slog.New(slog.DiscardHandler)

const (
	guestBase = 0x4000_0000
	userBase  = 0x7f12_0000_0000
	memSize   = 8 << 20
	ringSpan  = 0x10000  // ring r's parts at r*ringSpan
	bufBase   = 0x100000 // ring r's buffers at bufBase + r*0x100000
	bufSize   = 2048
	testNum   = 256
	testRings = 4 // two queue pairs
)

// A ring of more than testNum entries (up to 1024) spreads its parts
// further apart.
func (f *testFrontend) descOff(r int) int  { return r * ringSpan }
func (f *testFrontend) availOff(r int) int { return r*ringSpan + 0x1000*max(1, int(f.num)/testNum) }
func (f *testFrontend) usedOff(r int) int  { return r*ringSpan + 0x3000*max(1, int(f.num)/testNum) }
func (f *testFrontend) bufOff(r, i int) int {
	return bufBase + r*0x100000 + i*bufSize
}

// newTestFrontend connects to the port's socket and shares the memory;
// setup negotiates and starts the rings.
func newTestFrontend(t testing.TB, socket string) *testFrontend {
	t.Helper()
	fd, err := unix.MemfdCreate("vhostuser-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, memSize); err != nil {
		t.Fatalf("ftruncate: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	mem, err := unix.Mmap(fd, 0, memSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	f := &testFrontend{t: t, memFD: fd, mem: mem, num: testNum, hdrLen: hdrMrg}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	for i := range testRings {
		for _, p := range []*int{&f.kick[i], &f.call[i]} {
			if *p, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
				t.Fatalf("eventfd: %v", err)
			}
			fd := *p
			t.Cleanup(func() { unix.Close(fd) })
		}
	}
	if socket != "" {
		f.dial(socket)
	}
	return f
}

// newTestFrontendServer is newTestFrontend for a port in client mode: it
// listens on socket and takes the port's connection.
func newTestFrontendServer(t testing.TB, ln *net.UnixListener) *testFrontend {
	t.Helper()
	f := newTestFrontend(t, "")
	_ = ln.SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.AcceptUnix()
	if err != nil {
		t.Fatalf("accept the port's connection: %v", err)
	}
	f.conn = conn
	t.Cleanup(func() { conn.Close() })
	return f
}

func (f *testFrontend) dial(socket string) {
	f.t.Helper()
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatalf("dial %s: %v", socket, err)
	}
	conn := f.conn
	f.t.Cleanup(func() { conn.Close() })
}

// send sends a request with its payload and descriptors.
func (f *testFrontend) send(req uint32, flags uint32, payload []byte, fds ...int) error {
	msg := binary.LittleEndian.AppendUint32(nil, req)
	msg = binary.LittleEndian.AppendUint32(msg, version|flags)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(len(payload)))
	msg = append(msg, payload...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := f.conn.WriteMsgUnix(msg, oob, nil)
	return err
}

// reply reads the reply to req and returns its payload.
func (f *testFrontend) reply(req uint32) ([]byte, error) {
	_ = f.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [headerLen]byte
	if _, err := io.ReadFull(f.conn, hdr[:]); err != nil {
		return nil, err
	}
	h, err := parseHeader(hdr[:])
	if err != nil {
		return nil, err
	}
	if h.Request != req || h.Flags&flagReply == 0 {
		return nil, fmt.Errorf("reply to %s: got %s flags %#x", requestName(req), requestName(h.Request), h.Flags)
	}
	p := make([]byte, h.Size)
	_, err = io.ReadFull(f.conn, p)
	return p, err
}

// must sends a request that the port must accept: with REPLY_ACK
// negotiated it asks for the acknowledgement and checks it.
func (f *testFrontend) must(req uint32, payload []byte, fds ...int) {
	f.t.Helper()
	if err := f.send(req, flagNeedReply, payload, fds...); err != nil {
		f.t.Fatalf("%s: %v", requestName(req), err)
	}
	p, err := f.reply(req)
	if err != nil {
		f.t.Fatalf("%s: %v", requestName(req), err)
	}
	if len(p) != 8 || binary.LittleEndian.Uint64(p) != 0 {
		f.t.Fatalf("%s: refused (%x)", requestName(req), p)
	}
}

func (f *testFrontend) get(req uint32, payload []byte) []byte {
	f.t.Helper()
	if err := f.send(req, 0, payload); err != nil {
		f.t.Fatalf("%s: %v", requestName(req), err)
	}
	p, err := f.reply(req)
	if err != nil {
		f.t.Fatalf("%s: %v", requestName(req), err)
	}
	return p
}

// setup negotiates features (of those offered, the ones in want) and
// protocol features, shares the memory and starts both rings.
func (f *testFrontend) setup(want uint64) {
	f.t.Helper()
	offered := binary.LittleEndian.Uint64(f.get(reqGetFeatures, nil))
	if offered&featProtocol == 0 {
		f.t.Fatalf("features %#x: no VHOST_USER_F_PROTOCOL_FEATURES", offered)
	}
	proto := binary.LittleEndian.Uint64(f.get(reqGetProtocolFeatures, nil))
	if proto&protoReplyAck == 0 {
		f.t.Fatalf("protocol features %#x: no REPLY_ACK", proto)
	}
	if err := f.send(reqSetProtocolFeatures, 0, u64Payload(proto&(protoReplyAck|protoMQ))); err != nil {
		f.t.Fatal(err)
	}
	f.must(reqSetOwner, nil)
	f.must(reqSetFeatures, u64Payload((want&offered)|featProtocol))
	f.hdrLen = hdrLegacy
	if want&offered&(featVersion1|featMrgRxbuf) != 0 {
		f.hdrLen = hdrMrg
	}
	f.shareMemory()
	for r := range 2 {
		f.startRing(r, 0)
	}
}

// shareMemory sends the memfd as one region.
func (f *testFrontend) shareMemory() {
	f.t.Helper()
	p := binary.LittleEndian.AppendUint32(nil, 1)
	p = binary.LittleEndian.AppendUint32(p, 0)
	p = binary.LittleEndian.AppendUint64(p, guestBase)
	p = binary.LittleEndian.AppendUint64(p, memSize)
	p = binary.LittleEndian.AppendUint64(p, userBase)
	p = binary.LittleEndian.AppendUint64(p, 0)
	f.must(reqSetMemTable, p, f.memFD)
}

// startRing configures ring r from entry base on, kicks it off and
// enables it.
func (f *testFrontend) startRing(r int, base uint16) {
	f.t.Helper()
	f.configureRing(r, base)
	f.enableRing(r, true)
}

// configureRing configures ring r from entry base on and kicks it off,
// as QEMU does with every ring of the device; the ring runs once it is
// enabled too.
func (f *testFrontend) configureRing(r int, base uint16) {
	f.t.Helper()
	f.must(reqSetVringNum, statePayload(vringState{uint32(r), uint32(f.num)}))
	f.must(reqSetVringBase, statePayload(vringState{uint32(r), uint32(base)}))
	a := binary.LittleEndian.AppendUint32(nil, uint32(r))
	a = binary.LittleEndian.AppendUint32(a, 0)
	a = binary.LittleEndian.AppendUint64(a, userBase+uint64(f.descOff(r)))
	a = binary.LittleEndian.AppendUint64(a, userBase+uint64(f.usedOff(r)))
	a = binary.LittleEndian.AppendUint64(a, userBase+uint64(f.availOff(r)))
	a = binary.LittleEndian.AppendUint64(a, 0)
	f.must(reqSetVringAddr, a)
	f.must(reqSetVringCall, u64Payload(uint64(r)), f.call[r])
	f.must(reqSetVringKick, u64Payload(uint64(r)), f.kick[r])
}

// enableRing enables or disables ring r (SET_VRING_ENABLE), as QEMU
// does for the queue pairs the guest's driver turns on or off.
func (f *testFrontend) enableRing(r int, on bool) {
	f.t.Helper()
	n := uint32(0)
	if on {
		n = 1
	}
	f.must(reqSetVringEnable, statePayload(vringState{uint32(r), n}))
}

// setDesc writes descriptor i of ring r.
func (f *testFrontend) setDesc(r, i int, addr uint64, n uint32, flags, next uint16) {
	d := f.mem[f.descOff(r)+i*descLen:]
	binary.LittleEndian.PutUint64(d, addr)
	binary.LittleEndian.PutUint32(d[8:], n)
	binary.LittleEndian.PutUint16(d[12:], flags)
	binary.LittleEndian.PutUint16(d[14:], next)
}

// offer makes head available on ring r and publishes the index.
func (f *testFrontend) offer(r int, head uint16) {
	a := f.availOff(r)
	binary.LittleEndian.PutUint16(f.mem[a+4+2*int(f.availIdx[r]%f.num):], head)
	f.availIdx[r]++
	f.setAvailIdx(r, f.availIdx[r])
}

// setAvailIdx publishes the available index, as a driver's release store.
func (f *testFrontend) setAvailIdx(r int, idx uint16) {
	a := f.availOff(r)
	w := (*uint32)(unsafe.Pointer(&f.mem[a]))
	for {
		old := atomic.LoadUint32(w)
		if atomic.CompareAndSwapUint32(w, old, old&0xffff|uint32(idx)<<16) {
			return
		}
	}
}

func (f *testFrontend) usedIdx(r int) uint16 {
	return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.mem[f.usedOff(r)]))) >> 16)
}

func (f *testFrontend) usedFlags(r int) uint16 {
	return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.mem[f.usedOff(r)]))))
}

// used returns the used entries of ring r the guest has not read.
func (f *testFrontend) used(r int) (ids, lens []uint32) {
	end := f.usedIdx(r)
	for ; f.lastUsed[r] != end; f.lastUsed[r]++ {
		e := f.mem[f.usedOff(r)+4+8*int(f.lastUsed[r]%f.num):]
		ids = append(ids, binary.LittleEndian.Uint32(e))
		lens = append(lens, binary.LittleEndian.Uint32(e[4:]))
	}
	return ids, lens
}

// transmit puts frame, behind a zero virtio-net header, in the guest's
// transmit buffer slot and offers it as a one-descriptor chain.
func (f *testFrontend) transmit(slot int, frame []byte) { f.transmitOn(1, slot, frame) }

// transmitOn is transmit on ring r, a ring from the guest.
func (f *testFrontend) transmitOn(r, slot int, frame []byte) {
	off := f.bufOff(r, slot)
	clear(f.mem[off : off+f.hdrLen])
	copy(f.mem[off+f.hdrLen:], frame)
	f.setDesc(r, slot, guestBase+uint64(off), uint32(f.hdrLen+len(frame)), 0, 0)
	f.offer(r, uint16(slot))
}

// postRx offers n receive buffers of size bytes each, from slot first on.
func (f *testFrontend) postRx(first, n int, size uint32) { f.postRxOn(0, first, n, size) }

// postRxOn is postRx on ring r, a ring toward the guest.
func (f *testFrontend) postRxOn(r, first, n int, size uint32) {
	for i := first; i < first+n; i++ {
		f.setDesc(r, i, guestBase+uint64(f.bufOff(r, i)), size, descWrite, 0)
		f.offer(r, uint16(i))
	}
}

// received reads what the port delivered to the guest: each packet's
// virtio-net header and frame, gathering merged buffers.
func (f *testFrontend) received() (hdrs, frames [][]byte) { return f.receivedOn(0) }

// receivedOn is received on ring r, a ring toward the guest.
func (f *testFrontend) receivedOn(r int) (hdrs, frames [][]byte) {
	ids, lens := f.used(r)
	for i := 0; i < len(ids); {
		var pkt []byte
		first := f.mem[f.bufOff(r, int(ids[i])):]
		count := 1
		if f.hdrLen == hdrMrg {
			count = int(binary.LittleEndian.Uint16(first[vnet.HeaderLen:]))
		}
		for k := 0; k < count && i < len(ids); k++ {
			off := f.bufOff(r, int(ids[i]))
			pkt = append(pkt, f.mem[off:off+int(lens[i])]...)
			i++
		}
		hdrs = append(hdrs, pkt[:f.hdrLen])
		frames = append(frames, pkt[f.hdrLen:])
	}
	return hdrs, frames
}

func testPort(t testing.TB, cfg Config) (*Port, *buffer.Pool, *buffer.Cache) {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "vu0"
	}
	cfg.Socket = filepath.Join(t.TempDir(), "vhost.sock")
	if cfg.Log == nil {
		cfg.Log = quiet
	}
	p, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pool.NewCache(nil)
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
	return p, pool, c
}

// receiveAll polls the port's RX queue until it returns want packets or
// the bound passes.
func receiveAll(t *testing.T, p *Port, c *buffer.Cache, want int) []*buffer.Buf {
	t.Helper()
	var got []*buffer.Buf
	bufs := make([]*buffer.Buf, 64)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		n, err := p.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, bufs[:n]...)
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return got
}

// waitRunning waits until ring r runs.
func waitRunning(t testing.TB, p *Port, r int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		v := p.rings[r]
		v.mu.Lock()
		running := v.run != nil
		v.mu.Unlock()
		if running {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("ring %d never started", r)
}
