// Package vxlankind is the switch's vxlan ports: a VXLAN overlay to
// other hosts (package vxlan), bridged like a tap port or, with mode=l3,
// a routed VTEP beside tun ports. Everything the switch knows of vxlan
// ports is here: their options, how they print, check and open, which
// changes a running port takes (its remotes and fdb entries), how
// routes name a remote (via=), and their counters.
package vxlankind

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/packet"
	"softnet.dev/tun"
	"softnet.dev/vxlan"
)

// Kind is the vxlan kind, as the switch registers it.
var Kind = portkind.Kind{
	Name:     "vxlan",
	Synopsis: "vxlan:NAME,vni=N,local=IP,remote=IP",
	Keys:     []string{"vni", "local", "remote", "fdb", "port", "srcports", "mode", "vtep-mac"},
	Needs: []portkind.Need{
		{Key: "vni", Missing: "vxlan ports need vni=N"},
		{Key: "local", Missing: "vxlan ports need local=IP, the underlay's address to send from"},
	},
	Takes:    portkind.NetNS | portkind.Queues | portkind.Allow | portkind.MAC | portkind.DHCPServer | portkind.Router | portkind.Limits,
	NotTaken: "%s= applies to tun and tap ports",
	Help: `  vxlan:NAME,vni=N,local=IP[:PORT],remote=IP[,remote=IP...]
      [,fdb=MAC@REMOTE...][,port=N][,srcports=MIN-MAX][,mode=l2|l3]
      [,vtep-mac=MAC]
            a VXLAN overlay port, bridged like a tap port: guests'
            frames cross to the remote hosts in UDP (RFC 7348), from a
            socket in netns (the underlay's namespace). Unknown,
            broadcast and multicast destinations go to every remote;
            the source MACs that arrive are learned against their
            remote (ageing 300 s, at most 4096); fdb gives a MAC's
            remote for good. port is the remotes' UDP port (default
            4789, the IANA port; the kernel's vxlan uses 8472 unless
            given dstport 4789); local's port is the one to listen on
            (default: port); srcports the range of outer source ports
            (default 32768-60999): the port binds up to 16 of them, one
            a sending socket, and a hash of the inner flow picks one.
            Datagrams from other addresses are dropped (IP_RPFILTER),
            as are bad headers (VXLAN_INVALID_HDR) and other VNIs
            (VXLAN_VNI_NOT_FOUND). Guests should have the underlay's
            MTU less 50 (70 over IPv6): longer packets are dropped
            (PKT_TOO_BIG) and answered with ICMP "fragmentation
            needed" / "packet too big". A kernel peer: ip link add vx0
            type vxlan id N dstport 4789 local REMOTE remote LOCAL dev
            ETH, bridged with its guests (with dstport 8472, or none,
            give port=8472). With mode=l3 it is a routed VTEP beside
            tun ports, as Flannel's VXLAN backend builds one: route
            PREFIX=NAME,via=REMOTE sends guests' packets for PREFIX to
            REMOTE in frames from vtep-mac to REMOTE's VTEP MAC, given
            as fdb=MAC@REMOTE, and it takes only frames to vtep-mac
            (OTHERHOST). A reload that changes only remote= and fdb=
            changes the running port, without closing its sockets. It
            takes netns (the underlay's), queues, allow, mac,
            dhcp-server and router
`,
	New:         func() portkind.Options { return &Options{} },
	NewCounters: func() portkind.Counters { return &Counters{} },
}

// Options are a vxlan port's own options.
type Options struct {
	VNI uint32
	// Local is the underlay address and, if not 0, the port to receive
	// on (local=IP[:PORT]; 0: DstPort).
	Local   netip.AddrPort
	Remotes []netip.Addr
	DstPort uint16 // the remotes' port (port=; 0: vxlan.DefaultPort)
	// SrcPorts are the outer source ports (srcports=MIN-MAX; zero: the
	// kernel's ephemeral range, as vxlan.Config's defaults).
	SrcPorts [2]uint16
	// Static are the fdb=MAC@REMOTE entries: stations whose remote is
	// known, never learned over or aged; a routed port's remote VTEP MACs.
	Static []vxlan.StaticEntry
	// L3 (mode=l3) makes a routed overlay port, routed like a tun port
	// (route PREFIX=NAME,via=REMOTE), a VTEP whose MAC is VTEPMAC
	// (vtep-mac=).
	L3      bool
	VTEPMAC [6]byte
}

// Set parses one of the kind's options: remote= and fdb= add to a
// list, the others take the last value given.
func (o *Options) Set(k, v string) (bool, error) {
	switch k {
	case "vni":
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n > vxlan.MaxVNI {
			return true, fmt.Errorf("vni %q: want 0 to %d", v, vxlan.MaxVNI)
		}
		o.VNI = uint32(n)
	case "local":
		ap, err := netip.ParseAddrPort(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return true, fmt.Errorf("local %q: want IP or IP:PORT ([IPv6]:PORT)", v)
			}
			ap = netip.AddrPortFrom(a, 0)
		}
		o.Local = ap
	case "remote":
		a, err := netip.ParseAddr(v)
		if err != nil {
			return true, fmt.Errorf("remote %q: want an IP address", v)
		}
		o.Remotes = append(o.Remotes, a)
	case "port":
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return true, fmt.Errorf("port %q: want a UDP port, 1 to 65535", v)
		}
		o.DstPort = uint16(n)
	case "srcports":
		lo, hi, ok := strings.Cut(v, "-")
		a, aerr := strconv.ParseUint(lo, 10, 16)
		b, berr := strconv.ParseUint(hi, 10, 16)
		if !ok || aerr != nil || berr != nil || a == 0 || a > b {
			return true, fmt.Errorf("srcports %q: want MIN-MAX, 1 <= MIN <= MAX <= 65535", v)
		}
		o.SrcPorts = [2]uint16{uint16(a), uint16(b)}
	case "fdb":
		mac, ip, ok := strings.Cut(v, "@")
		m, merr := net.ParseMAC(mac)
		r, rerr := netip.ParseAddr(ip)
		if !ok || merr != nil || len(m) != 6 || rerr != nil {
			return true, fmt.Errorf("fdb %q: want MAC@REMOTE", v)
		}
		o.Static = append(o.Static, vxlan.StaticEntry{MAC: [6]byte(m), Remote: r})
	case "mode":
		if v != "l2" && v != "l3" {
			return true, fmt.Errorf("mode %q: want l2 (bridged) or l3 (routed)", v)
		}
		o.L3 = v == "l3"
	case "vtep-mac":
		m, err := net.ParseMAC(v)
		if err != nil || len(m) != 6 {
			return true, fmt.Errorf("vtep-mac %q: want a MAC address", v)
		}
		o.VTEPMAC = [6]byte(m)
	default:
		return false, nil
	}
	return true, nil
}

// Fields are the options as a spec writes them: vni, local, the
// remotes, port, the fdb entries, a routed port's mode and VTEP MAC,
// srcports.
func (o *Options) Fields() []portkind.Field {
	out := []portkind.Field{{Key: "vni", Value: strconv.FormatUint(uint64(o.VNI), 10)}}
	if o.Local.Port() != 0 {
		out = append(out, portkind.Field{Key: "local", Value: o.Local.String()})
	} else {
		out = append(out, portkind.Field{Key: "local", Value: o.Local.Addr().String()})
	}
	for _, r := range o.Remotes {
		out = append(out, portkind.Field{Key: "remote", Value: r.String()})
	}
	if o.DstPort != 0 {
		out = append(out, portkind.Field{Key: "port", Value: strconv.Itoa(int(o.DstPort))})
	}
	for _, e := range o.Static {
		out = append(out, portkind.Field{Key: "fdb", Value: net.HardwareAddr(e.MAC[:]).String() + "@" + e.Remote.String()})
	}
	if o.L3 {
		out = append(out, portkind.Field{Key: "mode", Value: "l3"}, portkind.Field{Key: "vtep-mac", Value: net.HardwareAddr(o.VTEPMAC[:]).String()})
	}
	if o.SrcPorts != [2]uint16{} {
		out = append(out, portkind.Field{Key: "srcports", Value: fmt.Sprintf("%d-%d", o.SrcPorts[0], o.SrcPorts[1])})
	}
	return out
}

// Config is the overlay port name opens with c and q queues.
func (o *Options) Config(name string, c portkind.Common, q int) vxlan.Config {
	return vxlan.Config{Name: name, VNI: o.VNI, Local: o.Local, Remotes: o.Remotes, NetNS: c.NetNS, Port: o.DstPort, Queues: q,
		SrcPortMin: o.SrcPorts[0], SrcPortMax: o.SrcPorts[1], Static: o.Static, L3: o.L3, VTEPMAC: o.VTEPMAC}
}

// Check checks the overlay as vxlan.Config.Validate does, and the
// port's name as a device's.
func (o *Options) Check(name string, c portkind.Common, q int) error {
	// Routes and reports name it as they name devices.
	if err := (tun.Config{Name: name}).Validate(); err != nil {
		return err
	}
	return o.Config(name, c, q).Validate()
}

// Layer is L3 for a routed port (mode=l3), else L2.
func (o *Options) Layer() packet.Layer {
	if o.L3 {
		return packet.L3
	}
	return packet.L2
}

// Live: a running port takes new remotes and static stations
// (vxlan.Port.SetRemotes); anything else opens its sockets again.
func (o *Options) Live(next portkind.Options) bool {
	n, ok := next.(*Options)
	if !ok {
		return false
	}
	return o.VNI == n.VNI && o.Local == n.Local && o.DstPort == n.DstPort && o.SrcPorts == n.SrcPorts && o.L3 == n.L3 && o.VTEPMAC == n.VTEPMAC
}

// CheckVia checks a route to a routed port: it names a remote with a
// VTEP MAC.
func (o *Options) CheckVia(name string, via netip.Addr) error {
	if !via.IsValid() {
		return errors.New("a route to a vxlan port says via=REMOTE")
	}
	if !slices.ContainsFunc(o.Static, func(e vxlan.StaticEntry) bool { return e.Remote == via }) {
		return fmt.Errorf("%v is no remote of %s with a VTEP MAC (fdb=MAC@%v)", via, name, via)
	}
	return nil
}
