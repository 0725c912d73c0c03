package vxlankind

import (
	"fmt"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/port"
	"softnet.dev/tun"
	"softnet.dev/vxlan"
)

// Open opens the port's sockets in the underlay's namespace.
func (o *Options) Open(name string, c portkind.Common, q int, _ portkind.Host) (portkind.Opened, error) {
	p, err := vxlan.Open(o.Config(name, c, q))
	if err != nil {
		return nil, err
	}
	return opened{p, o.L3}, nil
}

// opened is an open vxlan port.
type opened struct {
	p  *vxlan.Port
	l3 bool
}

func (v opened) Port() port.Port { return v.p }
func (v opened) Describe() []any { return []any{"info", v.p.Info().String()} }

// Stats are the overlay port's counters, those every port has among
// them.
func (v opened) Stats() portkind.Stats {
	s := v.p.Stats()
	return portkind.Stats{Own: &Counters{s}, Stats: tun.Stats{
		RxPackets: s.RxPackets, RxBytes: s.RxBytes, TxPackets: s.TxPackets, TxBytes: s.TxBytes,
		RxDrops: s.RxDrops, TxDrops: s.TxDrops,
		Segmented: s.Segmented, Segments: s.Segments, CsumFinished: s.CsumFinished,
	}}
}

// Change gives the running port next's remotes and static stations.
func (v opened) Change(next portkind.Options) error {
	n, ok := next.(*Options)
	if !ok {
		return fmt.Errorf("vxlan %s: options of another kind", v.p.Info().Name)
	}
	return v.p.SetRemotes(n.Remotes, n.Static)
}

// SetRoutes gives a routed port the routes to it, with their remotes.
func (v opened) SetRoutes(routes []portkind.Route) error {
	if !v.l3 {
		return nil
	}
	vias := make([]vxlan.Route, len(routes))
	for i, r := range routes {
		vias[i] = vxlan.Route{Prefix: r.Prefix, Via: r.Via}
	}
	return v.p.SetRoutes(vias)
}

// Stations are the stations behind the port's remotes, static and
// learned.
func (v opened) Stations() []portkind.Station {
	var out []portkind.Station
	for _, e := range v.p.Table() {
		out = append(out, portkind.Station{MAC: e.MAC, Dst: e.Remote, Static: e.Static, Age: e.Age})
	}
	return out
}

// Counters are a vxlan port's own counters: datagrams, floods,
// learned stations, system calls.
type Counters struct{ vxlan.Stats }

func (*Counters) Key() string { return "vxlan" }

func (v *Counters) Summary(port string) string {
	return fmt.Sprintf("vxlan %s: %d datagrams in, %d out (%d frames flooded), %d dropped in, %d out; stations: %d now, %d learned, %d moved, %d not learned (table full), %d aged out",
		port, v.RxPackets, v.TxPackets, v.Flooded, v.RxDrops.Total(), v.TxDrops.Total(), v.Stations, v.Learned, v.Moved, v.LearnFull, v.StationsAged)
}

func (*Counters) Offloads(string) string { return "" }

// Collect: a vxlan port has no metrics of its own.
func (*Counters) Collect(func(*portkind.Metric, uint64, ...string)) {}
