package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"softnet.dev/internal/netns"
)

// Built-in traffic: what the lab does without iperf3. The sockets are
// opened inside the guests' namespaces (and stay there); the sender and
// the receiver then run on goroutines of this process, each locked to an
// OS thread so that their CPU time can be told apart from the datapath's.
const (
	builtinTCPChunk = 128 << 10
	builtinRcvBuf   = 4 << 20
	// builtinDrain is how long the receiver keeps reading after the sender
	// stopped: packets still queued in the datapath arrive meanwhile.
	builtinDrain       = 300 * time.Millisecond
	builtinDialTimeout = 5 * time.Second
)

type builtinGen struct{}

func (builtinGen) name() string { return "built-in generator" }

func (builtinGen) start(ctx context.Context, p *guestPair, mode Mode, d time.Duration, ipv6 bool) (flow, error) {
	dst := netip.AddrPortFrom(p.b.addr(ipv6), transferPort)
	switch mode {
	case UDP:
		return startUDP(p.a.ns, p.b.ns, dst, udpPayload(ipv6), d)
	case TCP:
		return startTCP(p.a.ns, p.b.ns, dst, d)
	}
	return nil, fmt.Errorf("mode %q", mode)
}

// builtinFlow is the common part of both modes: two goroutines on locked
// threads, and how to stop them early.
type builtinFlow struct {
	d       time.Duration
	tids    [2]atomic.Int32 // sender, receiver
	wg      sync.WaitGroup
	closers []func()
	res     flowResult
	errs    [2]error // sender, receiver
}

// run starts f on a goroutine locked to its thread, recording the thread
// as role 0 (sender) or 1 (receiver).
func (f *builtinFlow) run(role int, body func() error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f.tids[role].Store(int32(unix.Gettid()))
		f.errs[role] = body()
	}()
}

func (f *builtinFlow) threads() []int {
	var out []int
	for i := range f.tids {
		if t := f.tids[i].Load(); t != 0 {
			out = append(out, int(t))
		}
	}
	return out
}

func (f *builtinFlow) wait(ctx context.Context) (flowResult, error) {
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		f.close()
		<-done
		return flowResult{}, ctx.Err()
	}
	f.close()
	if err := errors.Join(f.errs[0], f.errs[1]); err != nil {
		return flowResult{}, err
	}
	return f.res, nil
}

func (f *builtinFlow) close() {
	for _, c := range f.closers {
		c()
	}
	f.closers = nil
}

// startUDP sends payload-byte datagrams, each carrying a sequence
// number, from namespace src to dst in namespace dstNS as fast as the
// socket takes them, for d. The receiver counts what arrives; every
// datagram sent and not received is lost.
func startUDP(srcNS, dstNS string, dst netip.AddrPort, payload int, d time.Duration) (flow, error) {
	var rx, tx *net.UDPConn
	if err := netns.Do(dstNS, func() (err error) {
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp receiver: %w", err)
	}
	_ = rx.SetReadBuffer(builtinRcvBuf) // best effort: capped by rmem_max
	if err := netns.Do(srcNS, func() (err error) {
		tx, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		rx.Close()
		return nil, fmt.Errorf("udp sender: %w", err)
	}
	f := &builtinFlow{d: d, closers: []func(){func() { tx.Close() }, func() { rx.Close() }}}
	var sent atomic.Uint64
	senderDone := make(chan time.Duration, 1)
	f.run(0, func() error {
		buf := make([]byte, payload)
		start := time.Now()
		end := start.Add(d)
		var seq uint64
		// The clock is read once per 64 datagrams: cheap, and at least
		// a few hundred reads a second at any rate worth measuring.
		for ; seq&63 != 0 || time.Now().Before(end); seq++ {
			binary.BigEndian.PutUint64(buf, seq)
			if _, err := tx.Write(buf); err != nil {
				if errors.Is(err, net.ErrClosed) {
					break
				}
				// ECONNREFUSED from an ICMP error, ENOBUFS: the datagram is
				// lost, as iperf3 would count it.
			}
		}
		sent.Store(seq)
		senderDone <- time.Since(start)
		return nil
	})
	f.run(1, func() error {
		buf := make([]byte, 65536)
		var got, bytes, maxSeq uint64
		elapsed := make(chan time.Duration, 1)
		go func() {
			// Once the sender is done, give what is in flight a moment,
			// then end the receiver's read.
			d := <-senderDone
			_ = rx.SetReadDeadline(time.Now().Add(builtinDrain))
			elapsed <- d
		}()
		for {
			n, err := rx.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) || isTimeout(err) {
					break
				}
				continue
			}
			got++
			bytes += uint64(n)
			if n >= 8 {
				maxSeq = max(maxSeq, binary.BigEndian.Uint64(buf))
			}
		}
		// The sender ends on its own, or as soon as wait closed its socket.
		f.res.seconds = (<-elapsed).Seconds()
		// Datagrams sent after the last one received are lost too: the
		// sender's count covers them.
		total := max(sent.Load(), maxSeq+1)
		if got > 0 && f.res.seconds > 0 {
			f.res.bitsPerSecond = float64(bytes) * 8 / f.res.seconds
		}
		f.res.packets = got
		f.res.lost = total - min(got, total)
		f.res.lossPct = 100 * float64(f.res.lost) / float64(max(total, 1))
		f.res.hasLoss = true
		return nil
	})
	return f, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// startTCP streams from namespace src to dst in namespace dstNS for d,
// in builtinTCPChunk writes; the receiver counts bytes until EOF.
func startTCP(srcNS, dstNS string, dst netip.AddrPort, d time.Duration) (flow, error) {
	var ln *net.TCPListener
	if err := netns.Do(dstNS, func() (err error) {
		ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return nil, fmt.Errorf("tcp receiver: %w", err)
	}
	var conn *net.TCPConn
	if err := netns.Do(srcNS, func() error {
		c, err := net.DialTimeout("tcp", dst.String(), builtinDialTimeout)
		if err == nil {
			conn = c.(*net.TCPConn)
		}
		return err
	}); err != nil {
		ln.Close()
		return nil, fmt.Errorf("tcp sender: %w", err)
	}
	f := &builtinFlow{d: d}
	var mu sync.Mutex
	var peer *net.TCPConn
	f.closers = []func(){
		func() { conn.Close() },
		func() { ln.Close() },
		func() {
			mu.Lock()
			if peer != nil {
				peer.Close()
			}
			mu.Unlock()
		},
	}
	f.run(0, func() error {
		buf := make([]byte, builtinTCPChunk)
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if _, err := conn.Write(buf); err != nil {
				if errors.Is(err, net.ErrClosed) {
					return nil
				}
				return fmt.Errorf("tcp sender: %w", err)
			}
		}
		if n, ok := retransmits(conn); ok {
			f.res.retransmits, f.res.hasRetransmits = n, true
		}
		return conn.CloseWrite()
	})
	f.run(1, func() error {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("tcp receiver: %w", err)
		}
		mu.Lock()
		peer = c
		mu.Unlock()
		buf := make([]byte, 256<<10)
		var bytes uint64
		start := time.Now()
		for {
			n, err := c.Read(buf)
			bytes += uint64(n)
			if err != nil {
				break // EOF at the end, or closed by wait
			}
		}
		if secs := time.Since(start).Seconds(); secs > 0 {
			f.res.seconds = secs
			f.res.bitsPerSecond = float64(bytes) * 8 / secs
		}
		return nil
	})
	return f, nil
}

// retransmits returns the connection's retransmitted segments, from
// TCP_INFO.
func retransmits(c *net.TCPConn) (int64, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0, false
	}
	return int64(info.Total_retrans), true
}
