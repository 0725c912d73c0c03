// Package tunkind is the switch's tun and tap ports: Linux TUN and TAP
// devices (package tun) that the switch creates, or attaches to, in a
// namespace. A tun port carries IP packets and is routed; a tap port
// carries Ethernet frames and is bridged. Neither has options of its
// own: a port is its device, named by the port's name or dev=, with the
// options every port has.
package tunkind

import (
	"errors"
	"fmt"

	"softnet.dev/internal/knob"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/packet"
	"softnet.dev/tun"
)

// TUN and TAP are the kinds, as the switch registers them.
var (
	TUN = portkind.Kind{
		Name: "tun", Synopsis: "tun:NAME", GuestDevice: true, Takes: portkind.Every,
		Help: `  tun:NAME  a TUN device, routed by the L3 forwarder: it carries IP
            packets. NAME is the device: created if missing (and
            removed at exit), else attached to and left as found. It
            takes every option below but mac
`,
		New: func() portkind.Options { return &Options{} },
	}
	TAP = portkind.Kind{
		Name: "tap", Synopsis: "tap:NAME", GuestDevice: true, Takes: portkind.Every,
		Help: `  tap:NAME  a TAP device, bridged by MAC address: it carries
            Ethernet frames. NAME as for tun; it takes every option
            below
`,
		New: func() portkind.Options { return &Options{tap: true} },
	}
)

// Options are a tun or tap port's. The kinds have no options of their
// own; Knobs are the lab's.
type Options struct {
	tap bool
	// Knobs are tun.Config's, which softnet's lab sets to measure a
	// mechanism's worth; never parsed or printed.
	Knobs knob.TUN
}

var errTUNMAC = errors.New("mac= applies to tap ports: tun ports carry no MAC addresses")

// Set refuses mac= for a tun port, which carries no Ethernet header;
// every other option is the switch's.
func (o *Options) Set(key, _ string) (bool, error) {
	if key == "mac" && !o.tap {
		return true, errTUNMAC
	}
	return false, nil
}

// Fields are none: the kinds have no options of their own.
func (o *Options) Fields() []portkind.Field { return nil }

// Config is the device the port name opens with c and q queues.
func (o *Options) Config(name string, c portkind.Common, q int) tun.Config {
	cfg := tun.Config{Name: name, TAP: o.tap, NetNS: c.NetNS, Queues: q, Offload: c.Offload, GRO: c.GRO, IO: c.IO, Knobs: o.Knobs}
	if c.Dev != "" {
		cfg.Name, cfg.PortName = c.Dev, name
	}
	return cfg
}

// Check checks the device's rules (package tun's: name, namespace,
// queues) and, for a device named apart, the port's name, which routes
// name and which keeps a device name's rules.
func (o *Options) Check(name string, c portkind.Common, q int) error {
	if err := o.Config(name, c, q).Validate(); err != nil {
		return err
	}
	if c.Dev != "" {
		if err := (tun.Config{Name: name}).Validate(); err != nil {
			return fmt.Errorf("port name: %w", err)
		}
	}
	return nil
}

// Claim: one port has a device, whatever its kind.
func (o *Options) Claim(name string, c portkind.Common) string {
	return portkind.InterfaceClaim(name, c)
}

// Layer is L2 for a tap port, L3 for a tun port.
func (o *Options) Layer() packet.Layer {
	if o.tap {
		return packet.L2
	}
	return packet.L3
}

// Live is false: there is nothing of the kind's to change.
func (o *Options) Live(portkind.Options) bool { return false }

// Open creates or attaches to the device.
func (o *Options) Open(name string, c portkind.Common, q int, h portkind.Host) (portkind.Opened, error) {
	cfg := o.Config(name, c, q)
	cfg.Log = h.Log // link down and up, MTU changes
	cfg.Adopt = h.Adopt
	return open(cfg, h.Log)
}

var errNoChange = errors.New("tun and tap ports have no options of their own to change")
