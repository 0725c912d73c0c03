package endpoint

import (
	"context"
	"net/netip"
	"time"
)

// reader is ReadFrom's state: a batch of received views, copied out one
// by one and released together when the batch is used up.
type reader struct {
	views  []View
	pos, n int
}

func (r *reader) init() { r.views = make([]View, 32) }

// ReadFrom copies the next datagram's payload into p and returns its
// length and source, blocking until one arrives or the endpoint is
// closed. A payload longer than p is truncated, as recvfrom does without
// MSG_TRUNC. It is the copying alternative to Receive.
func (e *Endpoint) ReadFrom(p []byte) (int, netip.AddrPort, error) {
	for {
		n, src, ok, err := e.TryReadFrom(p)
		if ok || err != nil {
			return n, src, err
		}
		if err := e.Wait(context.Background()); err != nil {
			return 0, netip.AddrPort{}, err
		}
	}
}

// TryReadFrom is ReadFrom without blocking: ok is false if no datagram
// was waiting.
func (e *Endpoint) TryReadFrom(p []byte) (n int, src netip.AddrPort, ok bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, src, false, e.errorf("read: %w", ErrClosed)
	}
	r := &e.rd
	if r.pos == r.n {
		if err := e.releaseRead(); err != nil {
			return 0, src, false, err
		}
		r.n = e.receive(r.views)
		if r.n == 0 {
			return 0, src, false, nil
		}
	}
	v := &r.views[r.pos]
	r.pos++
	n, src = copy(p, v.Payload), v.Src
	if r.pos == r.n {
		// Give the batch back now rather than at the next call: the
		// application may not read again for a while.
		if err := e.releaseRead(); err != nil {
			return n, src, true, err
		}
	}
	return n, src, true, nil
}

func (e *Endpoint) releaseRead() error {
	r := &e.rd
	if r.n == 0 {
		return nil
	}
	err := e.release(r.views[:r.n])
	clear(r.views[:r.n])
	r.pos, r.n = 0, 0
	return err
}

// writeWait bounds how long WriteTo waits for the worker to stock a send
// buffer.
const writeWait = time.Second

// WriteTo copies p into a send buffer and sends it to dst. It waits (up
// to a second) for a buffer when none is ready, and fails with
// ErrNoBuffers after that.
func (e *Endpoint) WriteTo(p []byte, dst netip.AddrPort) (int, error) {
	var m [1]Message
	pause := 20 * time.Microsecond
	deadline := time.Now().Add(writeWait)
	for {
		e.mu.Lock()
		k, err := e.buffers(m[:], len(p))
		if err != nil {
			e.mu.Unlock()
			return 0, err
		}
		if k == 1 {
			copy(m[0].Payload, p)
			m[0].Dst = dst
			_, err = e.send(m[:])
			e.mu.Unlock()
			if err != nil {
				return 0, err
			}
			return len(p), nil
		}
		e.mu.Unlock()
		if time.Now().After(deadline) {
			return 0, e.errorf("write to %s: %w", dst, ErrNoBuffers)
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}
