// Package vhostkind is the switch's vhost-user ports: a VM's
// virtio-net device (package vhostuser), bridged like a tap port, over a
// Unix socket where the switch listens for the VM's front-end (QEMU,
// DPDK's virtio-user) or, with mode=client, connects to it.
package vhostkind

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"softnet.dev/internal/unixsock"
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
	Keys:     []string{"socket", "mode", "socket-owner", "socket-group", "socket-mode"},
	Needs:    []portkind.Need{{Key: "socket", Missing: "a vhost-user port needs socket=PATH"}},
	Takes:    portkind.Queues | portkind.Offload | portkind.Allow | portkind.MAC | portkind.DHCPServer | portkind.Router | portkind.Limits,
	NotTaken: "%s= applies to tun and tap devices, not to vhost-user ports",
	Help: `  vhost-user:NAME,socket=PATH[,mode=server|client]
            a VM's virtio-net device, bridged like a tap port, whose
            front-end (QEMU's -netdev vhost-user, DPDK's virtio-user)
            connects to the socket the switch listens on at PATH, and
            may reconnect (a VM that reboots); with mode=client the
            switch connects to the front-end's socket, and again
            whenever the front-end listens again. socket-owner=USER,
            socket-group=GROUP (names or IDs) and socket-mode=OCTAL
            (default 0660 with a group, else 0600; never writable by
            others) say who may connect: QEMU run by libvirt as its
            own user needs socket-owner=libvirt-qemu (Debian) or qemu,
            or its group. It takes queues, offload, allow, mac,
            dhcp-server and router
`,
	New:         func() portkind.Options { return &Options{} },
	NewCounters: func() portkind.Counters { return &Counters{} },
	Metrics:     []*portkind.Metric{mRefusals, mCalls, mPolls, mConnected, mQueuePairs, mFeature},
}

// The metrics of a vhost-user port's own counters.
var (
	mRefusals = &portkind.Metric{Name: "vhost_user_refusals_total", Help: "What a vhost-user port refused of its front-end (messages, descriptors, memory tables; a fault in guest memory under the control plane) and of its guest (descriptor chains, rings given up until restarted), by reason.", Labels: []string{"reason"}}
	mCalls    = &portkind.Metric{Name: "vhost_user_calls_total", Help: "Notifications of a vhost-user port's guest: sent, or failed because its call eventfd was saturated.", Labels: []string{"result"}}
	mPolls    = &portkind.Metric{Name: "vhost_user_polls_total", Help: "Wakeups of a sleeping worker for packets on a vhost-user ring that has no kick descriptor, which a timer polls."}
	// The front-end's state: a port waits for its VM until one connects.
	mConnected  = &portkind.Metric{Name: "vhost_user_frontend_connected", Help: "1 while a front-end (a VM's QEMU, DPDK's virtio-user) is connected to the vhost-user port, 0 while the port waits for one.", Gauge: true}
	mQueuePairs = &portkind.Metric{Name: "vhost_user_queue_pairs_enabled", Help: "Queue pairs of the vhost-user port that its front-end started (both rings running).", Gauge: true}
	mFeature    = &portkind.Metric{Name: "vhost_user_feature", Help: "1 for each virtio feature the vhost-user port's front-end negotiated, by name (bitN for one softnet does not name).", Labels: []string{"feature"}, Gauge: true}
)

// Options are a vhost-user port's own options.
type Options struct {
	Socket string
	// Client: the port connects to the front-end's socket (mode=client)
	// instead of listening on it (mode=server, the default).
	Client bool
	// Owner, Group and Mode are socket-owner=, socket-group= and
	// socket-mode= as given ("": not given), with the IDs they name.
	Owner, Group, Mode string
	perm               vhostuser.SocketPerm
}

// Set parses socket=, mode= and the socket's owner, group and mode.
func (o *Options) Set(k, v string) (bool, error) {
	switch k {
	case "socket":
		o.Socket = v
	case "mode":
		if v != "server" && v != "client" {
			return true, fmt.Errorf("mode %q: want server or client", v)
		}
		o.Client = v == "client"
	case "socket-owner":
		uid, err := unixsock.LookupUser(v)
		if err != nil {
			return true, fmt.Errorf("socket-owner: %w", err)
		}
		o.Owner, o.perm.UID = v, uid
	case "socket-group":
		gid, err := unixsock.LookupGroup(v)
		if err != nil {
			return true, fmt.Errorf("socket-group: %w", err)
		}
		o.Group, o.perm.GID = v, gid
	case "socket-mode":
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m == 0 || m > 0o777 {
			return true, fmt.Errorf("socket-mode %q: want permission bits in octal, such as 0660", v)
		}
		o.Mode, o.perm.Mode = v, fs.FileMode(m)
	default:
		return false, nil
	}
	return true, nil
}

// Fields are socket=, mode=client for a client, and the socket's owner,
// group and mode as given.
func (o *Options) Fields() []portkind.Field {
	out := []portkind.Field{{Key: "socket", Value: o.Socket}}
	if o.Client {
		out = append(out, portkind.Field{Key: "mode", Value: "client"})
	}
	for _, f := range []portkind.Field{{Key: "socket-owner", Value: o.Owner}, {Key: "socket-group", Value: o.Group}, {Key: "socket-mode", Value: o.Mode}} {
		if f.Value != "" {
			out = append(out, f)
		}
	}
	return out
}

// Config is the port name with c and q queue pairs.
func (o *Options) Config(name string, c portkind.Common, q int) vhostuser.Config {
	cfg := vhostuser.Config{Name: name, Socket: o.Socket, Client: o.Client, Queues: q, Offload: c.Offload}
	if o.Owner != "" || o.Group != "" || o.Mode != "" {
		perm := o.perm
		if o.Owner == "" {
			perm.UID = -1
		}
		if o.Group == "" {
			perm.GID = -1
		}
		cfg.Perm = &perm
	}
	return cfg
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

// State is the front-end's: waiting for one, or connected with the
// features it negotiated and the queue pairs it started.
func (v opened) State() portkind.State {
	return frontend(v.p.Stats(), v.p.Info().Queues)
}

// frontend is the state of a port of queues queue pairs whose counters
// are s.
func frontend(s vhostuser.Stats, queues int) portkind.State {
	if !s.Connected {
		return portkind.State{Summary: "no front-end connected", Fields: []portkind.Field{{Key: "frontend", Value: "waiting"}}}
	}
	pairs := fmt.Sprintf("%d of %d", s.RunningRings/2, queues)
	return portkind.State{
		Summary: "front-end connected, " + pairs + " queue pairs enabled",
		Fields: []portkind.Field{{Key: "frontend", Value: "connected"}, {Key: "queue_pairs_enabled", Value: pairs},
			{Key: "features", Value: strings.Join(vhostuser.FeatureNames(s.Features), " ")},
			{Key: "feature_bits", Value: fmt.Sprintf("%#x", s.Features)}},
	}
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
	st := "no front-end connected"
	if v.Connected {
		st = fmt.Sprintf("front-end connected (%d queue pairs running, features %s)", v.RunningRings/2, strings.Join(vhostuser.FeatureNames(v.Features), " "))
	}
	return fmt.Sprintf("%s (vhost-user): %s; segmented %d; %d connections so far, %d messages refused, %d bad descriptor chains, %d rings given up, %d guest notifications (%d failed), %d polls\n    refused of the front-end and guest: %s",
		port, st, v.Segmented, v.Connects, v.Refused, v.BadChains, v.BrokenRings, v.Calls, v.CallsFailed, v.Polls, &v.Refusals)
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
	connected := uint64(0)
	if v.Connected {
		connected = 1
	}
	add(mConnected, connected)
	add(mQueuePairs, uint64(v.RunningRings/2))
	for _, f := range vhostuser.FeatureNames(v.Features) {
		add(mFeature, 1, f)
	}
}
