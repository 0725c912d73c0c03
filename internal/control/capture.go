package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"softnet.dev/engine"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"softnet.dev/buffer"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
)

// A capture's buffer, in KiB as tcpdump's -B takes it: one budget that
// every worker's copies share, whatever the number of workers.
const (
	DefaultCaptureBufferKiB = 4 << 10
	MinCaptureBufferKiB     = 256 // holds a few copies of the largest frame
	MaxCaptureBufferKiB     = 64 << 10
)

// captureFilter is a conjunction of terms: `host ADDR`, `net PREFIX`,
// `proto tcp|udp|icmp|icmpv6|arp` and `port N`, joined by `and`.
type captureFilter struct {
	hosts []netip.Addr
	nets  []netip.Prefix
	proto string
	ports []uint16
}

var captureProtos = map[string]uint8{"tcp": packet.ProtoTCP, "udp": packet.ProtoUDP, "icmp": packet.ProtoICMP, "icmpv6": packet.ProtoICMPv6, "arp": 0}

// parseCaptureFilter parses a capture filter; "" matches everything.
func parseCaptureFilter(expr string) (captureFilter, error) {
	var f captureFilter
	words := strings.Fields(expr)
	for i := 0; i < len(words); {
		if i > 0 {
			if words[i] != "and" {
				return f, fmt.Errorf("filter %q: want \"and\" before %q", expr, words[i])
			}
			i++
		}
		if i+1 >= len(words) {
			return f, fmt.Errorf("filter %q: want host ADDR, net PREFIX, proto NAME or port N at the end", expr)
		}
		key, val := words[i], words[i+1]
		i += 2
		switch key {
		case "host":
			a, err := netip.ParseAddr(val)
			if err != nil {
				return f, fmt.Errorf("filter %q: host: %w", expr, err)
			}
			f.hosts = append(f.hosts, a.Unmap())
		case "net":
			p, err := netip.ParsePrefix(val)
			if err != nil {
				return f, fmt.Errorf("filter %q: net: %w", expr, err)
			}
			f.nets = append(f.nets, p.Masked())
		case "proto":
			if _, ok := captureProtos[val]; !ok {
				return f, fmt.Errorf("filter %q: proto %q: want tcp, udp, icmp, icmpv6 or arp", expr, val)
			}
			if f.proto != "" && f.proto != val {
				return f, fmt.Errorf("filter %q: matches nothing: proto %s and proto %s", expr, f.proto, val)
			}
			f.proto = val
		case "port":
			n, err := strconv.ParseUint(val, 10, 16)
			if err != nil {
				return f, fmt.Errorf("filter %q: port %q: want 0 to 65535", expr, val)
			}
			f.ports = append(f.ports, uint16(n))
		default:
			return f, fmt.Errorf("filter %q: unknown term %q (host, net, proto, port)", expr, key)
		}
	}
	return f, nil
}

func (f *captureFilter) empty() bool {
	return len(f.hosts) == 0 && len(f.nets) == 0 && f.proto == "" && len(f.ports) == 0
}

func (f *captureFilter) matches(h *packet.Headers) bool {
	for _, a := range f.hosts {
		if h.SrcIP != a && h.DstIP != a {
			return false
		}
	}
	for _, p := range f.nets {
		if !p.Contains(h.SrcIP) && !p.Contains(h.DstIP) {
			return false
		}
	}
	switch {
	case f.proto == "arp":
		if h.Proto != packet.EtherTypeARP {
			return false
		}
	case f.proto != "":
		if h.Proto == packet.EtherTypeARP || h.IPProto != captureProtos[f.proto] {
			return false
		}
	}
	for _, port := range f.ports {
		if h.L4Off == 0 || (h.IPProto != packet.ProtoTCP && h.IPProto != packet.ProtoUDP) || (h.SrcPort != port && h.DstPort != port) {
			return false
		}
	}
	return true
}

// captureOptions are what GET /v1/capture takes.
type captureOptions struct {
	port    int
	layer   packet.Layer
	rx, tx  bool
	snaplen int
	count   int // 0: until the client goes away
	buffer  int // bytes
	filter  captureFilter
}

// capture is an engine.Tap that copies a port's packets into its
// buffer, from which write takes them in the order they were copied.
type capture struct {
	opts captureOptions
	buf  *captureBuffer
}

func newCapture(o captureOptions) (*capture, error) {
	buf, err := newCaptureBuffer(o.buffer)
	if err != nil {
		return nil, err
	}
	return &capture{opts: o, buf: buf}, nil
}

// Tapped copies one packet, if it matches, into the buffer, or counts it
// lost if the buffer is full.
func (c *capture) Tapped(_, _ int, tx bool, b *buffer.Buf) {
	if tx && !c.opts.tx || !tx && !c.opts.rx {
		return
	}
	data := b.Bytes()
	if !c.opts.filter.empty() {
		var h packet.Headers
		if ok, _ := packet.Parse(data, c.opts.layer, &h); !ok || !c.opts.filter.matches(&h) {
			return
		}
	}
	c.buf.put(data[:min(len(data), c.opts.snaplen)], len(data))
}

// lost returns the packets the capture could not keep so far.
func (c *capture) lost() uint64 { return c.buf.missed.Load() }

// captureChunk is the unit a capture's buffer is carved in: a copy takes
// as many consecutive chunks as it needs, so that a small packet does not
// cost a snaplen.
const captureChunk = 128

// captureRecord describes the copy that starts at its chunk.
type captureRecord struct {
	seq    atomic.Uint64 // pos+1 once the copy at position pos is complete
	stamp  int64         // when the packet was seen, Unix nanoseconds
	caplen int32         // bytes copied, or padToEnd
	length int32         // the packet's length
}

// padToEnd marks the chunks from a record to the end of the ring as
// unused: a copy that would wrap starts at the beginning instead.
const padToEnd = -1

// captureChunkCost is what one chunk costs of the budget.
const captureChunkCost = captureChunk + int(unsafe.Sizeof(captureRecord{}))

// captureBuffer is a ring of chunks that any number of workers copy
// into and one writer takes from, in the order the copies were reserved.
// A worker reserves a copy's chunks with one compare-and-swap on head and
// publishes it with one store of its record's sequence number, as
// ring.MPSC does with fixed-size elements; it never waits: a copy that
// finds too few free chunks is counted missed. A slow worker holds up the
// writer, never another worker.
type captureBuffer struct {
	data    []byte
	records []captureRecord // by chunk
	chunks  uint64

	// head is the next chunk position to reserve, advanced by workers'
	// CAS; positions run free and are taken modulo chunks.
	_    cacheline.Pad
	head atomic.Uint64
	// tail is the next position to read. Only the writer stores it, once
	// done with every chunk below it.
	_    cacheline.Pad
	tail atomic.Uint64
	_    cacheline.Pad
	// missed counts the copies that found the buffer full.
	missed atomic.Uint64
	_      cacheline.Pad
}

// newCaptureBuffer carves a buffer of budget bytes, chunks and records
// together.
func newCaptureBuffer(budget int) (*captureBuffer, error) {
	n := budget / captureChunkCost
	if n < 1 {
		return nil, fmt.Errorf("capture buffer of %d bytes: want at least %d", budget, captureChunkCost)
	}
	return &captureBuffer{data: make([]byte, n*captureChunk), records: make([]captureRecord, n), chunks: uint64(n)}, nil
}

// footprint is the memory the buffer holds: at most its budget.
func (cb *captureBuffer) footprint() int {
	return len(cb.data) + len(cb.records)*int(unsafe.Sizeof(captureRecord{}))
}

// chunksFor is the number of chunks a copy of n bytes takes.
func chunksFor(n int) uint64 { return max(1, uint64(n+captureChunk-1)/captureChunk) }

// put copies data, the start of a packet of length bytes, and reports
// whether there was room. Any goroutine.
func (cb *captureBuffer) put(data []byte, length int) bool {
	need := chunksFor(len(data))
	for {
		// tail first: it never passes head, so head-tail cannot underflow.
		tail := cb.tail.Load()
		head := cb.head.Load()
		used := head - tail
		if used > cb.chunks {
			continue // the writer and other workers moved between the loads
		}
		at := head % cb.chunks
		var pad uint64
		if at+need > cb.chunks {
			pad = cb.chunks - at
		}
		if used+pad+need > cb.chunks {
			cb.missed.Add(1)
			return false
		}
		if !cb.head.CompareAndSwap(head, head+pad+need) {
			continue
		}
		if pad > 0 {
			r := &cb.records[at]
			r.caplen = padToEnd
			r.seq.Store(head + 1)
			head, at = head+pad, 0
		}
		r := &cb.records[at]
		r.caplen = int32(copy(cb.data[at*captureChunk:], data))
		r.length = int32(length)
		r.stamp = time.Now().UnixNano()
		r.seq.Store(head + 1)
		return true
	}
}

// next returns the oldest copy, with its pcap record header, or false if
// there is none or the worker copying it has not finished. The writer
// only; release gives it back.
func (cb *captureBuffer) next() (gopacket.CaptureInfo, []byte, bool) {
	for {
		tail := cb.tail.Load()
		at := tail % cb.chunks
		r := &cb.records[at]
		if r.seq.Load() != tail+1 {
			return gopacket.CaptureInfo{}, nil, false
		}
		if r.caplen == padToEnd {
			cb.tail.Store(tail + cb.chunks - at)
			continue
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, r.stamp), CaptureLength: int(r.caplen), Length: int(r.length)}
		off := at * captureChunk
		return ci, cb.data[off : off+uint64(r.caplen)], true
	}
}

// release frees the copy next returned, whose record header is ci. The
// writer only.
func (cb *captureBuffer) release(ci gopacket.CaptureInfo) {
	cb.tail.Store(cb.tail.Load() + chunksFor(ci.CaptureLength))
}

// linkType is the pcap link type of a port's packets.
func linkType(l packet.Layer) layers.LinkType {
	if l == packet.L2 {
		return layers.LinkTypeEthernet
	}
	return layers.LinkTypeRaw
}

// How a capture ended, as the Softnet-End trailer says.
const (
	endCount   = "count"        // count packets were written
	endClient  = "client"       // the client went away (EndStopped: the switch stops)
	endRemoved = "port-removed" // the port was removed from the switch
	endError   = "error"        // writing failed
)

// passMax bounds the packets one pass of write takes from the buffer.
const passMax = 4096

// write streams the capture as pcap to w until count packets are
// written, ctx ends or present reports the port gone (checked every
// tick), calling flush after each pass over the buffer; once ctx ends or
// the port goes, one more pass writes what the buffer holds. It returns
// the packets written and why it ended.
func (c *capture) write(ctx context.Context, w io.Writer, flush func(), present func() bool) (int, string, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(uint32(c.opts.snaplen), linkType(c.opts.layer)); err != nil {
		return 0, endError, err
	}
	flush()
	written := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for end := ""; ; {
		moved := 0
		// At most passMax packets a pass: workers refilling the buffer as
		// fast as it drains must not keep the pass from ending.
		for range passMax {
			ci, data, ok := c.buf.next()
			if !ok {
				break
			}
			err := pw.WritePacket(ci, data)
			c.buf.release(ci)
			if err != nil && end == endClient {
				return written, endClient, nil // the client went away
			} else if err != nil {
				return written, endError, err
			}
			written++
			moved++
			if c.opts.count > 0 && written == c.opts.count {
				flush()
				return written, endCount, nil
			}
		}
		if moved > 0 {
			flush()
		}
		if end != "" {
			// The pass after the port went, or ctx ended, took what the
			// last bursts left in the buffer.
			return written, end, nil
		}
		select {
		case <-ctx.Done():
			end = endClient
		case <-tick.C:
			if !present() {
				end = endRemoved
			}
		}
	}
}

// capture streams a port's packets as pcap, until count packets, the
// client goes away or the port is removed.
func (s *Server) capture(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	eng := s.sw.Engine()
	pv, ok := s.portView(q.Get("port"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no port %q", q.Get("port")))
		return
	}
	info := pv.Port.Info()
	o := captureOptions{port: pv.Index, layer: info.Layer}
	switch q.Get("dir") {
	case "", "both":
		o.rx, o.tx = true, true
	case "rx":
		o.rx = true
	case "tx":
		o.tx = true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("dir=%q: want rx, tx or both", q.Get("dir")))
		return
	}
	var err error
	if o.snaplen, err = queryInt(r, "snaplen", info.MaxFrame, 64, max(info.MaxFrame, 64)); err == nil {
		if o.count, err = queryInt(r, "count", 0, 0, math.MaxInt32); err == nil {
			if o.buffer, err = queryInt(r, "buffer", DefaultCaptureBufferKiB, MinCaptureBufferKiB, MaxCaptureBufferKiB); err == nil {
				o.buffer <<= 10
				o.filter, err = parseCaptureFilter(q.Get("filter"))
			}
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.claim(pv.Port) {
		writeError(w, http.StatusConflict, fmt.Sprintf("port %s: a capture is already running", info.Name))
		return
	}
	defer s.release(pv.Port)
	c, err := newCapture(o)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// The port is the one looked up as long as the switch runs that
	// device at that index: a port removed and added again under the
	// same name is another port.
	present := func() bool {
		cur, ok := s.portView(info.Name)
		return ok && cur.Port == pv.Port && cur.Index == pv.Index
	}
	if err := eng.SetTap(pv.Index, c); err != nil || !present() {
		// Removed since the look-up; the tap, if set on a port that took
		// the index since, comes off again.
		eng.ClearTap(pv.Index, c)
		if errors.Is(err, engine.ErrTapBusy) && present() {
			writeError(w, http.StatusConflict, fmt.Sprintf("port %s: a capture is already running", info.Name))
		} else {
			writeError(w, http.StatusNotFound, fmt.Sprintf("port %s: removed", info.Name))
		}
		return
	}
	w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
	w.Header().Set("Trailer", "Softnet-Captured, Softnet-Lost, Softnet-End")
	w.WriteHeader(http.StatusOK)
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	n, end, err := c.write(r.Context(), w, flush, present)
	// Only its own: the index may be another port's by now.
	eng.ClearTap(pv.Index, c)
	if end == endClient && s.switchStopped() {
		end = EndStopped
	}
	w.Header().Set("Softnet-Captured", strconv.Itoa(n))
	w.Header().Set("Softnet-Lost", strconv.FormatUint(c.lost(), 10))
	w.Header().Set("Softnet-End", end)
	s.log.Info("capture ended", "port", info.Name, "captured", n, "lost", c.lost(), "end", end, "err", err)
}
