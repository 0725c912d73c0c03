// Package afxdpkind is the switch's afxdp ports: an existing interface,
// the host end of a pod's veth pair or a NIC, attached through AF_XDP
// sockets (package afxdp) and bridged like a tap port. The switch does
// not create the interface, and leaves it as it found it.
package afxdpkind

import (
	"fmt"
	"strconv"

	"softnet.dev/afxdp"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/packet"
	"softnet.dev/tun"
)

// Kind is the afxdp kind, as the switch registers it.
var Kind = portkind.Kind{
	Name:     "afxdp",
	Synopsis: "afxdp:NAME",
	Keys:     []string{"mode", "zero-copy", "frame-size", "rx-ring", "tx-ring", "fill-ring", "completion-ring"},
	Takes:    portkind.NetNS | portkind.Dev | portkind.Queues | portkind.Allow | portkind.MAC | portkind.DHCPServer | portkind.Router | portkind.Limits,
	NotTaken: "%s= applies to tun and tap devices, not to afxdp ports (AF_XDP frames carry no offloads)",
	Help: `  afxdp:NAME[,mode=native|generic][,zero-copy=on|off][,frame-size=N]
       [,rx-ring=N][,tx-ring=N][,fill-ring=N][,completion-ring=N]
            an existing interface (NAME, or dev= in netns=): the host
            end of a veth pair or a NIC, bridged like a tap port
            through AF_XDP sockets, one per queue, fed by an XDP
            program softnet attaches (and refuses an interface with
            another's). mode= is where the program runs (default:
            native where the driver has XDP), zero-copy= whether the
            driver shares the frames (default: where it can; veth
            copies), frame-size= the longest frame one buffer holds
            (default: the MTU's; longer ones arrive in pieces), and
            the rings have 64 to 16384 entries (default 2048 for rx
            and fill, 512 for tx and completion). Its
            interface needs a receive queue per worker. It takes
            netns, dev, queues, allow, mac, dhcp-server, router and
            the rate limits
`,
	New:         func() portkind.Options { return &Options{} },
	NewCounters: func() portkind.Counters { return &Counters{} },
	Metrics:     []*portkind.Metric{mCalls, mPassed, mFixed},
	Lends:       afxdp.WorkerBuffers,
}

// The metrics of an afxdp port's own counters.
var (
	mCalls  = &portkind.Metric{Name: "afxdp_syscalls_total", Help: "System calls an afxdp port's queues made: fill ring wakeups (rx) and transmit kicks (tx), only when the kernel asked for them.", Labels: []string{"dir"}}
	mPassed = &portkind.Metric{Name: "afxdp_xdp_pass_total", Help: "Frames an afxdp port's XDP program handed to the kernel's stack: not lost, not the port's."}
	mFixed  = &portkind.Metric{Name: "afxdp_offloads_total", Help: "What an afxdp port did in software that a frame's offload metadata would have done: received checksums finished (rx_csum), packets segmented (segmented) and checksums finished (csum) before transmission.", Labels: []string{"work"}}
)

// Options are an afxdp port's own options; the zero value is every
// default.
type Options struct {
	Mode      afxdp.Mode
	ZeroCopy  afxdp.ZeroCopy
	FrameSize int
	// Rings are the receive, transmit, fill and completion rings'
	// entries (0: afxdp.DefaultRxRing, DefaultRing).
	Rings [4]int
}

var ringKeys = [4]string{"rx-ring", "tx-ring", "fill-ring", "completion-ring"}

// Set parses the kind's options.
func (o *Options) Set(k, v string) (bool, error) {
	switch k {
	case "mode":
		switch v {
		case "native":
			o.Mode = afxdp.ModeNative
		case "generic":
			o.Mode = afxdp.ModeGeneric
		default:
			return true, fmt.Errorf("mode %q: want native or generic", v)
		}
		return true, nil
	case "zero-copy":
		switch v {
		case "on":
			o.ZeroCopy = afxdp.ZeroCopyOn
		case "off":
			o.ZeroCopy = afxdp.ZeroCopyOff
		default:
			return true, fmt.Errorf("zero-copy %q: want on or off", v)
		}
		return true, nil
	case "frame-size":
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return true, fmt.Errorf("frame-size %q: want a number of bytes", v)
		}
		o.FrameSize = n
		return true, nil
	}
	for i, key := range ringKeys {
		if k == key {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return true, fmt.Errorf("%s %q: want a number of entries", k, v)
			}
			o.Rings[i] = n
			return true, nil
		}
	}
	return false, nil
}

// Fields are the options set, in the order of the kind's Keys.
func (o *Options) Fields() []portkind.Field {
	var out []portkind.Field
	if o.Mode != afxdp.ModeAuto {
		out = append(out, portkind.Field{Key: "mode", Value: o.Mode.String()})
	}
	if o.ZeroCopy != afxdp.ZeroCopyAuto {
		out = append(out, portkind.Field{Key: "zero-copy", Value: o.ZeroCopy.String()})
	}
	if o.FrameSize != 0 {
		out = append(out, portkind.Field{Key: "frame-size", Value: strconv.Itoa(o.FrameSize)})
	}
	for i, n := range o.Rings {
		if n != 0 {
			out = append(out, portkind.Field{Key: ringKeys[i], Value: strconv.Itoa(n)})
		}
	}
	return out
}

// Config is the port name with c and q queues; Pool and Log are the
// switch's, at Open.
func (o *Options) Config(name string, c portkind.Common, q int) afxdp.Config {
	return afxdp.Config{Name: name, Dev: c.Dev, NetNS: c.NetNS, Queues: q, Mode: o.Mode, ZeroCopy: o.ZeroCopy, FrameSize: o.FrameSize,
		RxRing: o.Rings[0], TxRing: o.Rings[1], FillRing: o.Rings[2], CompletionRing: o.Rings[3]}
}

// Check checks the port as afxdp.Config.Check does (a spec parsed
// alone has no pool), and the port's name
// as a device's: routes and reports name it as they name devices.
func (o *Options) Check(name string, c portkind.Common, q int) error {
	if err := (tun.Config{Name: name}).Validate(); err != nil {
		return err
	}
	return o.Config(name, c, q).Check()
}

// Claim: one port has an interface, whatever its kind; tun and tap
// ports claim theirs in the same words.
func (o *Options) Claim(name string, c portkind.Common) string {
	return portkind.InterfaceClaim(name, c)
}

// Layer is L2: the interface carries Ethernet frames.
func (o *Options) Layer() packet.Layer { return packet.L2 }

// Live is false: every option of the kind is the sockets' or the
// program's, which a change opens again.
func (o *Options) Live(portkind.Options) bool { return false }
