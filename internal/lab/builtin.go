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

func (builtinGen) start(ctx context.Context, p *guestPair, t transfer) (flow, error) {
	dst := netip.AddrPortFrom(p.b.addr(t.ipv6), transferPort)
	if t.reverse || t.omit > 0 {
		return nil, fmt.Errorf("the built-in generator sends from a to b only, and measures the whole transfer")
	}
	if t.tcp() {
		return startTCP(p.a.ns, p.b.ns, dst, t.d, max(t.streams, 1))
	}
	return startUDP(p.a.ns, p.b.ns, dst, t)
}

// builtinFlow is the common part of both modes: goroutines on locked
// threads, and how to stop them early.
type builtinFlow struct {
	d       time.Duration
	mu      sync.Mutex
	tids    []int
	wg      sync.WaitGroup
	closers []func()
	res     flowResult
	errs    []error
}

// run starts body on a goroutine locked to its thread, recording the
// thread and body's error.
func (f *builtinFlow) run(body func() error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f.mu.Lock()
		f.tids = append(f.tids, unix.Gettid())
		f.mu.Unlock()
		err := body()
		f.mu.Lock()
		f.errs = append(f.errs, err)
		f.mu.Unlock()
	}()
}

func (f *builtinFlow) threads() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.tids...)
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
	if err := errors.Join(f.errs...); err != nil {
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

// udpMaxSegments bounds the datagrams of one UDP_SEGMENT send: the
// kernel takes at most 64 (UDP_MAX_SEGMENTS before 6.9) and 64 KiB.
const (
	udpMaxSegments = 64
	udpMaxGSOBytes = 65000
)

// gsoSegments returns how many datagrams of payload bytes one
// UDP_SEGMENT send carries: 44 of 1472 bytes, 64 KiB in all.
func gsoSegments(payload int) int {
	return max(1, min(udpMaxSegments, udpMaxGSOBytes/payload))
}

// pacer holds a sender to rate bits of payload per second; a zero rate
// does not hold it at all. It sleeps when the sender is ahead by more
// than a millisecond's worth, so the datagrams leave in small bursts as
// iperf3's do.
type pacer struct {
	start       time.Time
	bytesPerSec float64
}

// wait returns once sending sent bytes so far keeps to the rate.
func (p pacer) wait(sent uint64) {
	if p.bytesPerSec <= 0 {
		return
	}
	due := p.start.Add(time.Duration(float64(sent) / p.bytesPerSec * float64(time.Second)))
	if ahead := time.Until(due); ahead > time.Millisecond {
		time.Sleep(ahead)
	}
}

// startUDP sends t.payload-byte datagrams, each carrying a sequence
// number, from namespace src to dst in namespace dstNS, as fast as the
// socket takes them or at t.rate, for t.d. With t.gso each send carries
// gsoSegments datagrams, which the kernel splits (UDP_SEGMENT, a socket
// option here; QUIC stacks pass it per send in a control message). The
// receiver counts what arrives; every datagram sent and not received is
// lost.
func startUDP(srcNS, dstNS string, dst netip.AddrPort, t transfer) (flow, error) {
	payload := t.payload
	var rx, tx *net.UDPConn
	if err := netns.Do(dstNS, func() (err error) {
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp receiver: %w", err)
	}
	rcvbuf := builtinRcvBuf
	if t.rcvbuf > 0 {
		rcvbuf = t.rcvbuf
	}
	_ = rx.SetReadBuffer(rcvbuf) // best effort: capped by rmem_max
	if err := netns.Do(srcNS, func() (err error) {
		tx, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		rx.Close()
		return nil, fmt.Errorf("udp sender: %w", err)
	}
	segs := 1
	if t.gso {
		segs = gsoSegments(payload)
		if err := setUDPSegment(tx, payload); err != nil {
			tx.Close()
			rx.Close()
			return nil, err
		}
	}
	f := &builtinFlow{d: t.d, closers: []func(){func() { tx.Close() }, func() { rx.Close() }}}
	var sent atomic.Uint64
	senderDone := make(chan time.Duration, 1)
	f.run(func() error {
		buf := make([]byte, payload*segs)
		start := time.Now()
		end := start.Add(t.d)
		pace := pacer{start: start, bytesPerSec: t.rate / 8}
		var seq uint64
		var sendErr error
		// The clock is read once per 64 sends: cheap, and at least a few
		// hundred reads a second at any rate worth measuring.
		for i := 0; i&63 != 0 || time.Now().Before(end); i++ {
			pace.wait(seq * uint64(payload))
			for s := range segs {
				binary.BigEndian.PutUint64(buf[s*payload:], seq+uint64(s))
			}
			seq += uint64(segs)
			if _, err := tx.Write(buf); err != nil {
				if errors.Is(err, net.ErrClosed) {
					break
				}
				if t.gso && errors.Is(err, unix.EIO) {
					// The kernel refuses a GSO send on a device without
					// checksum offload; nothing was sent.
					sendErr = skipError{fmt.Errorf("udp sender: the kernel refuses UDP_SEGMENT sends on a device without checksum offload: %w", err)}
					seq -= uint64(segs)
					break
				}
				// ECONNREFUSED from an ICMP error, ENOBUFS: the datagrams
				// are lost, as iperf3 would count them.
			}
		}
		sent.Store(seq)
		senderDone <- time.Since(start)
		return sendErr
	})
	f.run(func() error {
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
		if got == 0 {
			total = sent.Load()
		}
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

// setUDPSegment sets UDP_SEGMENT on c: each send is split into datagrams
// of size bytes, by the device if it has USO, else by the kernel.
func setUDPSegment(c *net.UDPConn, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("udp sender: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
	}); err != nil {
		return fmt.Errorf("udp sender: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("udp sender: setsockopt UDP_SEGMENT %d: %w", size, serr)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// startTCP streams from namespace src to dst in namespace dstNS for d
// over the given number of connections, each written in
// builtinTCPChunk writes by a thread of its own; the receivers count
// bytes until EOF.
func startTCP(srcNS, dstNS string, dst netip.AddrPort, d time.Duration, streams int) (flow, error) {
	var ln *net.TCPListener
	if err := netns.Do(dstNS, func() (err error) {
		ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return nil, fmt.Errorf("tcp receiver: %w", err)
	}
	f := &builtinFlow{d: d}
	var mu sync.Mutex
	var peers []*net.TCPConn
	f.closers = []func(){
		func() { ln.Close() },
		func() {
			mu.Lock()
			for _, p := range peers {
				p.Close()
			}
			mu.Unlock()
		},
	}
	conns := make([]*net.TCPConn, 0, streams)
	for range streams {
		if err := netns.Do(srcNS, func() error {
			c, err := net.DialTimeout("tcp", dst.String(), builtinDialTimeout)
			if err == nil {
				conns = append(conns, c.(*net.TCPConn))
			}
			return err
		}); err != nil {
			for _, c := range conns {
				c.Close()
			}
			ln.Close()
			return nil, fmt.Errorf("tcp sender: %w", err)
		}
	}
	for _, c := range conns {
		f.closers = append(f.closers, func() { c.Close() })
	}
	var retrans atomic.Int64
	var senders sync.WaitGroup
	var received atomic.Uint64
	start := time.Now()
	senders.Add(streams)
	for _, conn := range conns {
		f.run(func() error {
			defer senders.Done()
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
				retrans.Add(n)
			}
			return conn.CloseWrite()
		})
	}
	var receivers sync.WaitGroup
	receivers.Add(streams)
	for range streams {
		f.run(func() error {
			defer receivers.Done()
			c, err := ln.AcceptTCP()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return nil
				}
				return fmt.Errorf("tcp receiver: %w", err)
			}
			mu.Lock()
			peers = append(peers, c)
			mu.Unlock()
			buf := make([]byte, 256<<10)
			for {
				n, err := c.Read(buf)
				received.Add(uint64(n))
				if err != nil {
					return nil // EOF at the end, or closed by wait
				}
			}
		})
	}
	// The figures, once every stream is done: set before wait returns,
	// since wait waits for this goroutine too.
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		senders.Wait()
		receivers.Wait()
		if secs := time.Since(start).Seconds(); secs > 0 {
			f.res.seconds = secs
			f.res.bitsPerSecond = float64(received.Load()) * 8 / secs
		}
		f.res.retransmits, f.res.hasRetransmits = retrans.Load(), true
	}()
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
