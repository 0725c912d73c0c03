package vswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"softnet.dev/endpoint"
)

// ServiceSpec is one --service argument: KIND:ADDR:PORT, a built-in
// application the switch itself runs on an endpoint: udp-echo sends every
// datagram back to its source, udp-sink counts them.
type ServiceSpec struct {
	Kind string // "udp-echo" or "udp-sink"
	Addr netip.AddrPort

	at string
}

func (s ServiceSpec) String() string { return s.Kind + ":" + s.Addr.String() }

var serviceKinds = []string{"udp-echo", "udp-sink"}

// ParseService parses a --service value, e.g. udp-echo:198.18.1.254:7 or
// udp-sink:[2001:db8:1::fe]:9.
func ParseService(s string) (ServiceSpec, error) {
	kind, addr, ok := strings.Cut(s, ":")
	if !ok {
		return ServiceSpec{}, fmt.Errorf("service %q: want KIND:ADDR:PORT", s)
	}
	if !slices.Contains(serviceKinds, kind) {
		return ServiceSpec{}, fmt.Errorf("service %q: unknown kind %q (%s)", s, kind, strings.Join(serviceKinds, ", "))
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ServiceSpec{}, fmt.Errorf("service %q: %q: want ADDR:PORT, e.g. 198.18.1.254:7 or [2001:db8:1::fe]:9", s, addr)
	}
	if ap.Port() == 0 {
		return ServiceSpec{}, fmt.Errorf("service %q: port 0", s)
	}
	return ServiceSpec{Kind: kind, Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, nil
}

// ServiceStats is a service's line of the report.
type ServiceStats struct {
	Service  string         `json:"service"`
	Packets  uint64         `json:"packets"`
	Bytes    uint64         `json:"bytes"`
	Echoed   uint64         `json:"echoed"`
	Dropped  uint64         `json:"dropped"` // echoes without a send buffer, or too big
	Endpoint endpoint.Stats `json:"endpoint"`
}

// service is a running built-in application.
type service struct {
	spec                   ServiceSpec
	ep                     *endpoint.Endpoint
	packets, bytes, echoed atomic.Uint64
	dropped                atomic.Uint64
	views                  []endpoint.View
	msgs                   []endpoint.Message
	log                    *slog.Logger
}

// run serves until ctx is done. Echo receives lent views (no copy in)
// and copies each payload once into a send buffer; sink only counts.
func (s *service) run(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	echo := s.spec.Kind == "udp-echo"
	if echo {
		// Ask for send buffers now, so that the first echo finds them.
		_, _ = s.ep.Buffers(nil, 0)
	}
	for {
		if err := s.ep.Wait(ctx); err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, endpoint.ErrClosed) {
				s.log.Error("service", "service", s.spec.String(), "err", err)
			}
			return
		}
		n, err := s.ep.Receive(s.views)
		if err != nil {
			return
		}
		views := s.views[:n]
		var bytes uint64
		for _, v := range views {
			bytes += uint64(len(v.Payload))
		}
		s.packets.Add(uint64(n))
		s.bytes.Add(bytes)
		if echo {
			s.echo(views)
		}
		if err := s.ep.Release(views...); err != nil {
			s.log.Error("service release", "service", s.spec.String(), "err", err)
		}
	}
}

func (s *service) echo(views []endpoint.View) {
	limit := s.ep.MaxPayload()
	eligible := 0
	for _, v := range views {
		if len(v.Payload) <= limit {
			eligible++
		}
	}
	// Ask for exactly as many buffers as will be used: a send buffer
	// taken and not sent stays with the endpoint until it closes.
	k := 0
	for try := 0; k < eligible && try < 100; try++ {
		if try > 0 {
			// The worker stocks send buffers at its next poll.
			time.Sleep(100 * time.Microsecond)
		}
		got, err := s.ep.Buffers(s.msgs[k:eligible], limit)
		if err != nil {
			return
		}
		k += got
	}
	out := 0
	for _, v := range views {
		if out == k || len(v.Payload) > limit {
			s.dropped.Add(1)
			continue
		}
		m := &s.msgs[out]
		m.Payload = m.Payload[:copy(m.Payload, v.Payload)]
		m.Dst = v.Src
		out++
	}
	sent, err := s.ep.Send(s.msgs[:out])
	s.echoed.Add(uint64(sent))
	if err != nil {
		s.log.Error("service send", "service", s.spec.String(), "err", err)
	}
}

func (s *service) stats() ServiceStats {
	return ServiceStats{
		Service: s.spec.String(), Packets: s.packets.Load(), Bytes: s.bytes.Load(),
		Echoed: s.echoed.Load(), Dropped: s.dropped.Load(), Endpoint: s.ep.Stats(),
	}
}
