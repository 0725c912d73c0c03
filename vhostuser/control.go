//go:build linux

package vhostuser

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// vring is one virtqueue's configuration and, while it runs, its view of
// guest memory. The control plane changes it under mu; the ring's worker
// holds mu for one burst at a time with TryLock, so a worker never waits
// for the control plane: a burst that finds the ring being changed skips
// it until the next round.
type vring struct {
	mu    sync.Mutex
	index int
	// txMu serializes the transmit queues that share this ring (a guest
	// enabled fewer pairs than the switch has workers: txRoute.shared),
	// so that neither drops because the other holds mu for a burst. It
	// is taken before mu, and only by workers.
	txMu sync.Mutex

	num     uint32
	addr    vringAddr
	addrSet bool
	base    uint16 // the next available entry, while stopped
	kickFD  int    // -1: none (polling mode, or not given yet)
	// kickWatched: kickFD is in the queue's epoll set, as it is while
	// the ring runs (watchKick); a running ring whose kick is not is
	// polled (rxQueue.Arm).
	kickWatched bool
	calls       calls // how the guest is notified (call.go)
	started     bool  // SET_VRING_KICK came, and no GET_VRING_BASE since
	enabled     bool
	run         *split // nil while stopped
}

// toGuest says whether the ring carries packets to the guest: rings
// 0, 2, ... are virtio-net's receive queues.
func (v *vring) toGuest() bool { return v.index%2 == 0 }

// serve serves front-ends one at a time until Close: in server mode
// each one the listener accepts, in client mode each connection it
// makes, retrying while the front-end's socket is not there.
func (p *Port) serve() {
	defer p.wg.Done()
	for {
		var conn *net.UnixConn
		var err error
		if p.cfg.Client {
			conn, err = p.dial()
		} else {
			conn, err = p.ln.AcceptUnix()
		}
		if err != nil {
			if !p.closed.Load() {
				p.log.Error("vhost-user accept", "err", err)
			}
			return
		}
		p.mu.Lock()
		if p.closed.Load() {
			p.mu.Unlock()
			conn.Close()
			return
		}
		p.conn = conn
		p.mu.Unlock()
		p.connects.Add(1)
		p.connected.Store(true)
		p.log.Info("vhost-user front-end connected")
		err = p.session(conn)
		p.disconnect()
		conn.Close()
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		p.connected.Store(false)
		switch {
		case errors.Is(err, io.EOF) || p.closed.Load():
			p.log.Info("vhost-user front-end disconnected")
		default:
			p.log.Warn("vhost-user front-end dropped", "err", err)
		}
		if p.cfg.Client {
			// A front-end that hangs up at once must not make this a
			// busy loop.
			select {
			case <-p.stop:
				return
			case <-time.After(redialEvery):
			}
		}
	}
}

// redialEvery is how often a client-mode port tries the front-end's
// socket while it cannot connect: a VM's QEMU that restarts listens
// again within seconds.
const redialEvery = 250 * time.Millisecond

// dial connects to the front-end's socket, trying every redialEvery
// until it succeeds or the port closes (net.ErrClosed).
func (p *Port) dial() (*net.UnixConn, error) {
	addr := &net.UnixAddr{Name: p.cfg.Socket, Net: "unix"}
	logged := false
	for {
		conn, err := net.DialUnix("unix", nil, addr)
		if err == nil {
			return conn, nil
		}
		if !logged {
			p.log.Info("vhost-user front-end not there yet; retrying", "err", err)
			logged = true
		}
		select {
		case <-p.stop:
			return nil, net.ErrClosed
		case <-time.After(redialEvery):
		}
	}
}

// session reads and answers one front-end's messages until it goes
// away or sends what cannot be parsed.
func (p *Port) session(conn *net.UnixConn) error {
	var hdr [headerLen]byte
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	for {
		m, fds, err := readMessage(conn, hdr[:], oob)
		if err != nil {
			var re *refusedError
			if errors.As(err, &re) {
				p.countRefusal(re.reason)
			}
			return err
		}
		reply, herr := p.handle(m, fds)
		if p.memFault {
			p.countRefusal(RefusedMemoryFault)
			return fmt.Errorf("%s: guest memory faulted: the front-end shrank its memory under the mapping", requestName(m.Request))
		}
		switch {
		case reply != nil:
		case m.Flags&flagNeedReply != 0 && p.protocol&protoReplyAck != 0:
			// REPLY_ACK: 0 for success, anything else for failure.
			status := uint64(0)
			if herr != nil {
				status = 1
			}
			reply = u64Payload(status)
		case errors.Is(herr, errUnsupported):
			// A request this back-end does not know, which the features
			// it offered should have kept away: if the front-end waits
			// for a reply it learns nothing, as from a back-end of an
			// older protocol; go on.
		case herr != nil:
			// Without an acknowledgement the front-end cannot learn of
			// the failure, and would go on with a device that is not
			// what it thinks: end the session.
			p.countRefusal(refusalOf(herr))
			return herr
		}
		if herr != nil {
			p.countRefusal(refusalOf(herr))
			p.log.Warn("vhost-user message refused", "err", herr)
		}
		if reply != nil {
			if _, err := conn.Write(appendReply(nil, m.msgHeader, reply)); err != nil {
				return fmt.Errorf("reply to %s: %w", requestName(m.Request), err)
			}
		}
	}
}

// refusalOf is the reason an error of handle counts as.
func refusalOf(err error) Refusal {
	var re *refusedError
	switch {
	case errors.As(err, &re):
		return re.reason
	case errors.Is(err, errUnsupported):
		return RefusedUnsupported
	}
	return RefusedRequest
}

// readMessage reads one message and the descriptors it carries, which
// the caller owns from then on. A message that does not parse is an
// error of RefusedMalformed, one cut short by the front-end hanging up
// of RefusedTruncated.
func readMessage(conn *net.UnixConn, hdr, oob []byte) (message, []int, error) {
	n, oobn, _, _, err := conn.ReadMsgUnix(hdr, oob)
	var fds []int
	if oobn > 0 {
		fds = parseRights(oob[:oobn])
	}
	fail := func(err error) (message, []int, error) {
		closeFDs(fds)
		return message{}, nil, err
	}
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		return fail(io.EOF)
	}
	if n < len(hdr) {
		if _, err := io.ReadFull(conn, hdr[n:]); err != nil {
			return fail(truncated(fmt.Errorf("message header: %w", err)))
		}
	}
	h, err := parseHeader(hdr)
	if err != nil {
		return fail(refuse(RefusedMalformed, err))
	}
	payload := make([]byte, h.Size)
	if _, err := io.ReadFull(conn, payload); err != nil {
		return fail(truncated(fmt.Errorf("%s: payload: %w", requestName(h.Request), err)))
	}
	m, err := parsePayload(h, payload)
	if err != nil {
		return fail(refuse(RefusedMalformed, err))
	}
	return m, fds, nil
}

// truncated marks a read error inside a message as RefusedTruncated when
// the front-end hung up; other errors (the port closing the connection)
// are not the front-end's doing.
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, unix.ECONNRESET) {
		return refuse(RefusedTruncated, err)
	}
	return err
}

// parseRights returns the descriptors of SCM_RIGHTS messages in oob.
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, cm := range msgs {
		if got, err := unix.ParseUnixRights(&cm); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// offered are the virtio features this port offers.
func (p *Port) offered() uint64 {
	f := uint64(baseFeatures)
	if p.cfg.Offload {
		f |= offloadFeatures
	}
	if p.cfg.Queues > 1 {
		// QEMU's virtio-net device offers MQ itself; DPDK's
		// virtio-user takes it from the back-end.
		f |= featMQ
	}
	return f
}

func (p *Port) offeredProtocol() uint64 {
	f := uint64(baseProtocolFeats)
	if p.cfg.Queues > 1 {
		f |= protoMQ
	}
	return f
}

// handle carries out one request. It returns the reply's payload for
// requests that have one, and takes ownership of fds.
func (p *Port) handle(m message, fds []int) ([]byte, error) {
	takeFD := func() (int, error) {
		if m.U64&vringNoFD != 0 {
			closeFDs(fds)
			return -1, nil
		}
		if len(fds) != 1 {
			closeFDs(fds)
			return -1, fmt.Errorf("%s: %d file descriptors, want 1", requestName(m.Request), len(fds))
		}
		fd := fds[0]
		var err error
		switch m.Request {
		case reqSetVringKick:
			err = checkEventfd(fd)
		case reqSetVringCall:
			err = takeCall(fd)
		}
		if err != nil {
			unix.Close(fd)
			return -1, refuse(RefusedNotEventfd, fmt.Errorf("%s %d: %w", requestName(m.Request), m.U64&vringIndexMask, err))
		}
		return fd, nil
	}
	if m.Request != reqSetMemTable && m.Request != reqSetVringKick && m.Request != reqSetVringCall && m.Request != reqSetVringErr {
		closeFDs(fds) // no other request this back-end takes carries one
	}
	switch m.Request {
	case reqGetFeatures:
		return u64Payload(p.offered()), nil
	case reqSetFeatures:
		if extra := m.U64 &^ p.offered(); extra != 0 {
			// Front-ends ack bits they handle themselves (DPDK's
			// virtio-user emulates some); they mean nothing here.
			p.log.Debug("vhost-user features acknowledged but not offered; ignored", "features", fmt.Sprintf("%#x", extra))
		}
		p.features = m.U64 & p.offered()
		p.negotiated.Store(p.features)
		p.eachRing(func(v *vring) {
			if p.features&featProtocol == 0 {
				// Without protocol features a ring is enabled from the
				// start.
				v.enabled = true
			}
		})
		return nil, nil
	case reqGetProtocolFeatures:
		return u64Payload(p.offeredProtocol()), nil
	case reqSetProtocolFeatures:
		if extra := m.U64 &^ p.offeredProtocol(); extra != 0 {
			return nil, fmt.Errorf("SET_PROTOCOL_FEATURES: %#x were not offered", extra)
		}
		p.protocol = m.U64
		return nil, nil
	case reqGetQueueNum:
		return u64Payload(uint64(p.cfg.Queues)), nil
	case reqSetOwner:
		return nil, nil
	case reqResetOwner:
		p.stopAll()
		p.features = 0
		p.negotiated.Store(0)
		return nil, nil
	case reqSetMemTable:
		t, err := mapMemTable(m.Regions, fds)
		if err != nil {
			return nil, refuse(RefusedMemTable, err)
		}
		p.setMem(t)
		return nil, nil
	case reqSetVringNum, reqSetVringBase, reqSetVringEnable, reqGetVringBase:
		v, err := p.ring(m.State.Index, m.Request)
		if err != nil {
			return nil, err
		}
		return p.ringState(v, m)
	case reqSetVringAddr:
		v, err := p.ring(m.Addr.Index, m.Request)
		if err != nil {
			return nil, err
		}
		p.change(v, func() { v.addr, v.addrSet = m.Addr, true })
		return nil, nil
	case reqSetVringKick, reqSetVringCall, reqSetVringErr:
		v, err := p.ring(uint32(m.U64&vringIndexMask), m.Request)
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fd, err := takeFD()
		if err != nil {
			return nil, err
		}
		switch m.Request {
		case reqSetVringKick:
			p.change(v, func() { p.setKick(v, fd); v.started = true })
		case reqSetVringCall:
			p.change(v, func() { v.calls.set(fd) })
		default:
			// Errors are not reported through it.
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		return nil, nil
	case reqSetLogBase, reqSetLogFD, reqSendRARP:
		// Dirty-page logging (migration) and RARP announcements were not
		// offered; a front-end that sends them anyway is ignored.
		return nil, nil
	}
	return nil, fmt.Errorf("%s: %w", requestName(m.Request), errUnsupported)
}

var errUnsupported = errors.New("not supported")

// ringState carries out the requests whose payload is a vring state.
func (p *Port) ringState(v *vring, m message) ([]byte, error) {
	switch m.Request {
	case reqSetVringNum:
		n := m.State.Num
		if n == 0 || n > maxQueueSize || n&(n-1) != 0 {
			return nil, fmt.Errorf("SET_VRING_NUM %d: queue size %d is not a power of two up to %d", v.index, n, maxQueueSize)
		}
		p.change(v, func() { v.num = n })
	case reqSetVringBase:
		if m.State.Num > 0xffff {
			return nil, fmt.Errorf("SET_VRING_BASE %d: base %d has more than 16 bits", v.index, m.State.Num)
		}
		p.change(v, func() { v.base = uint16(m.State.Num) })
	case reqSetVringEnable:
		p.change(v, func() { v.enabled = m.State.Num != 0 })
	case reqGetVringBase:
		// Stops the ring (vhost-user.rst, "Starting and stopping rings").
		var base uint16
		p.change(v, func() {
			p.stopRing(v)
			base = v.base
			v.started = false
			p.setKick(v, -1)
		})
		return statePayload(vringState{Index: uint32(v.index), Num: uint32(base)}), nil
	}
	return nil, nil
}

// ring returns the ring a request names.
func (p *Port) ring(i uint32, req uint32) (*vring, error) {
	if int(i) >= len(p.rings) {
		return nil, fmt.Errorf("%s: ring %d, but the port has %d rings (queues=%d)", requestName(req), i, len(p.rings), p.cfg.Queues)
	}
	return p.rings[i], nil
}

// change applies f to v while its worker is out of it, then starts or
// stops the ring as its new state says, and wakes the worker.
func (p *Port) change(v *vring, f func()) {
	v.mu.Lock()
	f()
	p.refresh(v)
	p.watchKick(v)
	v.mu.Unlock()
	p.wake(v)
}

// eachRing applies f to every ring (see change).
func (p *Port) eachRing(f func(v *vring)) {
	for _, v := range p.rings {
		p.change(v, func() {
			// Renegotiation: the header length or offloads may differ,
			// so a running ring restarts with the new features.
			p.stopRing(v)
			f(v)
		})
	}
}

// refresh starts v if it may run and does not, with v.mu held. Starting
// reads and writes the ring in guest memory, guarded: a fault there
// (the front-end shrank its memory file) ends the front-end's session
// (p.memFault).
func (p *Port) refresh(v *vring) {
	if v.run != nil || !v.started || !v.enabled || !v.addrSet || v.num == 0 || p.mem == nil || p.memFault {
		if v.run != nil && (!v.started || !v.enabled) {
			p.stopRing(v)
		}
		return
	}
	var r *split
	var why string
	if guarded(func() {
		if r, why = newSplit(p.mem, v.num, v.addr, v.base); r != nil {
			r.setFeatures(p.features)
			// The device polls: the guest need not kick, until a worker
			// that goes to sleep asks for kicks (rxQueue.Arm). A ring
			// toward the guest is filled when packets come, so it never
			// needs kicks.
			r.setNoNotify(true)
		}
	}) {
		p.memFault = true
		p.log.Warn("vhost-user guest memory faulted: the front-end shrank its memory under the mapping", "ring", v.index)
		return
	}
	if r == nil {
		p.countRefusal(RefusedRingAddress)
		p.log.Warn("vhost-user ring not started", "ring", v.index, "why", why)
		return
	}
	v.run = r
	p.running.Add(1)
	if v.toGuest() {
		p.remapTx()
	}
}

// stopRing stops v, keeping where it stopped as its base, with v.mu
// held.
func (p *Port) stopRing(v *vring) {
	if v.run != nil {
		v.base = v.run.lastAvail
		v.run = nil
		p.running.Add(-1)
		if v.toGuest() {
			p.remapTx()
		}
	}
}

// stopAll stops every ring.
func (p *Port) stopAll() {
	for _, v := range p.rings {
		p.change(v, func() {
			p.stopRing(v)
			v.started = false
		})
	}
}

// setMem replaces the memory table: every ring stops using the old one
// and restarts on the new one before it is unmapped.
func (p *Port) setMem(t *memTable) {
	for _, v := range p.rings {
		v.mu.Lock()
	}
	for _, v := range p.rings {
		p.stopRing(v)
	}
	p.mu.Lock()
	old := p.mem
	p.mem = t
	p.mu.Unlock()
	old.unmap()
	for _, v := range p.rings {
		p.refresh(v)
		p.watchKick(v)
		v.mu.Unlock()
		p.wake(v)
	}
}

// setKick replaces v's kick descriptor, with v.mu held. Only rings from
// the guest wait for kicks (watchKick).
func (p *Port) setKick(v *vring, fd int) {
	if v.kickFD >= 0 {
		if v.kickWatched {
			p.rxqs[v.index/2].unwatch(v.kickFD)
			v.kickWatched = false
		}
		unix.Close(v.kickFD)
		v.kickFD = -1
	}
	if fd >= 0 && v.toGuest() {
		unix.Close(fd)
		return
	}
	v.kickFD = fd
}

// watchKick makes v's queue watch its kick descriptor while the ring
// runs, and only then, with v.mu held: a guest that kicks a ring that is
// stopped, disabled or given up wakes no one. A kick that cannot be
// watched leaves the ring polled, as one without a kick descriptor.
func (p *Port) watchKick(v *vring) {
	want := v.kickFD >= 0 && v.run != nil && !v.run.broken
	if want == v.kickWatched {
		return
	}
	q := p.rxqs[v.index/2]
	if !want {
		q.unwatch(v.kickFD)
		v.kickWatched = false
		return
	}
	if err := q.watch(v.kickFD); err != nil {
		p.log.Warn("vhost-user kick not watched: the ring is polled", "ring", v.index, "err", err)
		return
	}
	v.kickWatched = true
}

// wake tells the worker of v's queue that the ring changed.
func (p *Port) wake(v *vring) {
	if !v.toGuest() {
		signalFD(p.rxqs[v.index/2].wakeFD)
	}
}

// disconnect returns the port to its state before a front-end came:
// rings stopped and unconfigured, descriptors closed, memory unmapped.
func (p *Port) disconnect() {
	for _, v := range p.rings {
		p.change(v, func() {
			p.stopRing(v)
			p.setKick(v, -1)
			v.calls.set(-1)
			v.num, v.addr, v.addrSet, v.base = 0, vringAddr{}, false, 0
			v.started, v.enabled = false, false
		})
	}
	p.mu.Lock()
	old := p.mem
	p.mem = nil
	p.mu.Unlock()
	old.unmap()
	p.features, p.protocol = 0, 0
	p.negotiated.Store(0)
	p.memFault = false
}
