package control

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"softnet.dev/buffer"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/ring"
)

// captureSlots is the number of packets a worker can have copied and not
// yet written per capture: past that, copies are lost (counted), never
// the packets.
const captureSlots = 256

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
	filter  captureFilter
}

// capture is an engine.Tap that copies a port's packets into per-worker
// slots, from which Write takes them in order of arrival per worker.
type capture struct {
	opts  captureOptions
	lanes []captureLane
}

type captureLane struct {
	_     cacheline.Pad
	free  *ring.SPSC[int32] // slots the writer gave back
	full  *ring.SPSC[int32] // slots the worker filled
	slots [][]byte
	meta  []gopacket.CaptureInfo
	hdrs  packet.Headers
	lostN uint64        // the worker's count
	lost  atomic.Uint64 // published for the writer
	_     cacheline.Pad
}

func newCapture(o captureOptions, workers int) (*capture, error) {
	c := &capture{opts: o, lanes: make([]captureLane, workers)}
	for i := range c.lanes {
		l := &c.lanes[i]
		var err error
		if l.free, err = ring.NewSPSC[int32](captureSlots); err != nil {
			return nil, err
		}
		if l.full, err = ring.NewSPSC[int32](captureSlots); err != nil {
			return nil, err
		}
		l.slots = make([][]byte, captureSlots)
		l.meta = make([]gopacket.CaptureInfo, captureSlots)
		for s := range l.slots {
			l.slots[s] = make([]byte, o.snaplen)
			l.free.Enqueue(int32(s))
		}
	}
	return c, nil
}

// Tapped copies one packet, if it matches, into a free slot.
func (c *capture) Tapped(worker, _ int, tx bool, b *buffer.Buf) {
	if tx && !c.opts.tx || !tx && !c.opts.rx || worker >= len(c.lanes) {
		return
	}
	l := &c.lanes[worker]
	data := b.Bytes()
	if !c.opts.filter.empty() {
		if ok, _ := packet.Parse(data, c.opts.layer, &l.hdrs); !ok || !c.opts.filter.matches(&l.hdrs) {
			return
		}
	}
	s, ok := l.free.Dequeue()
	if !ok {
		l.lostN++
		l.lost.Store(l.lostN)
		return
	}
	n := copy(l.slots[s], data)
	l.meta[s] = gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: n, Length: len(data)}
	l.full.Enqueue(s) // fits: there are as many places as slots
}

// lost returns the copies lost so far.
func (c *capture) lost() uint64 {
	var n uint64
	for i := range c.lanes {
		n += c.lanes[i].lost.Load()
	}
	return n
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

// write streams the capture as pcap to w until count packets are
// written, ctx ends or present reports the port gone (checked every
// tick), calling flush after each pass over the lanes; once ctx ends or
// the port goes, one more pass writes what the lanes hold. It returns
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
		for i := range c.lanes {
			l := &c.lanes[i]
			// At most a lane's worth a pass: a worker refilling it as
			// fast as it drains must not keep the pass from ending.
			for range len(l.slots) {
				s, ok := l.full.Dequeue()
				if !ok {
					break
				}
				ci := l.meta[s]
				err := pw.WritePacket(ci, l.slots[s][:ci.CaptureLength])
				l.free.Enqueue(s)
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
		}
		if moved > 0 {
			flush()
		}
		if end != "" {
			// The pass after the port went, or ctx ended, took what the
			// last bursts left in the lanes.
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
