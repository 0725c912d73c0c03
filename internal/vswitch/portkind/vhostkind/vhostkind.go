// Package vhostkind is the switch's vhost-user ports: a VM's
// virtio-net device (package vhostuser), bridged like a tap port, over a
// Unix socket where the switch listens for the VM's front-end (QEMU,
// DPDK's virtio-user) or, with mode=client, connects to it.
package vhostkind

import (
	"errors"
	"fmt"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/tun"
	"softnet.dev/vhostuser"
)

// Kind is the vhost-user kind, as the switch registers it.
var Kind = portkind.Kind{
	Name:     "vhost-user",
	Synopsis: "vhost-user:NAME,socket=PATH",
	Keys:     []string{"socket", "mode"},
	Needs:    []portkind.Need{{Key: "socket", Missing: "a vhost-user port needs socket=PATH"}},
	Takes:    portkind.Queues | portkind.Offload | portkind.Allow | portkind.MAC | portkind.DHCPServer | portkind.Router | portkind.Limits,
	NotTaken: "%s= applies to tun and tap devices, not to vhost-user ports",
	Help: `  vhost-user:NAME,socket=PATH[,mode=server|client]
            a VM's virtio-net device, bridged like a tap port, whose
            front-end (QEMU's -netdev vhost-user, DPDK's virtio-user)
            connects to the socket the switch listens on at PATH, and
            may reconnect (a VM that reboots); with mode=client the
            switch connects to the front-end's socket, and again
            whenever the front-end listens again. It takes queues,
            offload, allow, mac, dhcp-server and router
`,
	New:         func() portkind.Options { return &Options{} },
	NewCounters: func() portkind.Counters { return &Counters{} },
	Metrics:     []*portkind.Metric{mRefusals, mCalls, mPolls},
}

// The metrics of a vhost-user port's own counters.
var (
	mRefusals = &portkind.Metric{Name: "vhost_user_refusals_total", Help: "What a vhost-user port refused of its front-end (messages, descriptors, memory tables; a fault in guest memory under the control plane) and of its guest (descriptor chains, rings given up until restarted), by reason.", Labels: []string{"reason"}}
	mCalls    = &portkind.Metric{Name: "vhost_user_calls_total", Help: "Notifications of a vhost-user port's guest: sent, or failed because its call eventfd was saturated.", Labels: []string{"result"}}
	mPolls    = &portkind.Metric{Name: "vhost_user_polls_total", Help: "Wakeups of a sleeping worker for packets on a vhost-user ring that has no kick descriptor, which a timer polls."}
)

// Options are a vhost-user port's own options.
type Options struct {
	Socket string
	// Client: the port connects to the front-end's socket (mode=client)
	// instead of listening on it (mode=server, the default).
	Client bool
}

// Set parses socket= and mode=.
func (o *Options) Set(k, v string) (bool, error) {
	switch k {
	case "socket":
		o.Socket = v
	case "mode":
		if v != "server" && v != "client" {
			return true, fmt.Errorf("mode %q: want server or client", v)
		}
		o.Client = v == "client"
	default:
		return false, nil
	}
	return true, nil
}

// Fields are socket=, and mode=client for a client.
func (o *Options) Fields() []portkind.Field {
	out := []portkind.Field{{Key: "socket", Value: o.Socket}}
	if o.Client {
		out = append(out, portkind.Field{Key: "mode", Value: "client"})
	}
	return out
}

// Config is the port name with c and q queue pairs.
func (o *Options) Config(name string, c portkind.Common, q int) vhostuser.Config {
	return vhostuser.Config{Name: name, Socket: o.Socket, Client: o.Client, Queues: q, Offload: c.Offload}
}

// Check checks the port as vhostuser.Config.Validate does.
func (o *Options) Check(name string, c portkind.Common, q int) error {
	return o.Config(name, c, q).Validate()
}

// Claim: one port listens on a socket, or connects to it.
func (o *Options) Claim(string, portkind.Common) string { return "listens on socket " + o.Socket }

// Layer is L2: a virtio-net device carries Ethernet frames.
func (o *Options) Layer() packet.Layer { return packet.L2 }

// Live is false: a new socket or mode is a new port.
func (o *Options) Live(portkind.Options) bool { return false }

// Open listens on the socket (or connects to it) from here on, for a
// VM's front-end.
func (o *Options) Open(name string, c portkind.Common, q int, h portkind.Host) (portkind.Opened, error) {
	cfg := o.Config(name, c, q)
	cfg.Log = h.Log
	p, err := vhostuser.Listen(cfg)
	if err != nil {
		return nil, err
	}
	return opened{p}, nil
}

// opened is an open vhost-user port.
type opened struct{ p *vhostuser.Port }

func (v opened) Port() port.Port { return v.p }

func (v opened) Describe() []any {
	return []any{"info", v.p.Info().String(), "socket", v.p.Socket()}
}

// Stats are the port's counters; those a TAP device has too go where
// its are, so that every view (drops, metrics) shows them alike.
func (v opened) Stats() portkind.Stats {
	s := v.p.Stats()
	return portkind.Stats{Own: &Counters{s}, Stats: tun.Stats{
		RxPackets: s.RxPackets, RxBytes: s.RxBytes, TxPackets: s.TxPackets, TxBytes: s.TxBytes,
		RxDrops: s.RxDrops, TxDrops: s.TxDrops, Segmented: s.Segmented,
	}}
}

func (v opened) Change(portkind.Options) error {
	return errors.New("a vhost-user port's options change only with a reopen")
}

// Counters are a vhost-user port's own counters: its guest's
// descriptors, rings, notifications and connections.
type Counters struct{ vhostuser.Stats }

func (*Counters) Key() string { return "vhost_user" }

func (*Counters) Summary(string) string { return "" }

func (v *Counters) Offloads(port string) string {
	return fmt.Sprintf("%s (vhost-user): segmented %d; %d front-ends connected, %d messages refused, %d bad descriptor chains, %d rings given up, %d guest notifications (%d failed), %d polls\n    refused of the front-end and guest: %s",
		port, v.Segmented, v.Connects, v.Refused, v.BadChains, v.BrokenRings, v.Calls, v.CallsFailed, v.Polls, &v.Refusals)
}

// Collect gives the refusals by reason, the guest notifications sent
// and failed, and the polls of rings without a kick.
func (v *Counters) Collect(add func(m *portkind.Metric, n uint64, labels ...string)) {
	for r, n := range v.Refusals {
		add(mRefusals, n, vhostuser.Refusal(r).String())
	}
	add(mCalls, v.Calls, "sent")
	add(mCalls, v.CallsFailed, "failed")
	add(mPolls, v.Polls)
}
