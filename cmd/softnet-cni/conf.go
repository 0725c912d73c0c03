package main

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"softnet.dev/internal/agentstatus"
	"softnet.dev/internal/vswitch"
	"softnet.dev/tun"
)

// Defaults of the network configuration.
const (
	defaultSocket = "/run/softnet/softnet.sock"
	defaultMode   = "tun"
	defaultMTU    = 1500
)

// netConf is the network configuration on stdin.
type netConf struct {
	types.PluginConf
	Socket string `json:"socket"` // the switch's control socket
	Mode   string `json:"mode"`   // tun (routed), tap (bridged): the kind of the switch's ports; or veth (bridged: afxdp ports on veths)
	MTU    int    `json:"mtu"`
	// PodCIDRsFrom is the status file of softnet agent (its --status,
	// /run/softnet/agent.json by default): the IPAM plugin's ranges
	// become the node's pod CIDRs, one range set each, as the agent read
	// them from the Node's spec.podCIDRs. Empty: ipam's own ranges.
	PodCIDRsFrom string `json:"podCIDRsFrom"`
	// RuntimeConfig is what the runtime passes for the capabilities
	// the configuration declares ("capabilities": {"bandwidth": true}).
	RuntimeConfig struct {
		Bandwidth *bandwidth `json:"bandwidth,omitempty"`
	} `json:"runtimeConfig"`

	// ipamStdin is the configuration the IPAM plugin is given: stdin,
	// with the node's ranges if PodCIDRsFrom says so.
	ipamStdin []byte
}

// bandwidth is the CNI bandwidth capability, the reference bandwidth
// plugin's runtimeConfig: rates in bits per second, bursts in bits, named
// from the pod's side: ingress is what the pod receives. The switch's
// ports name them from the switch's: the pod's ingress is its port's
// egress.
type bandwidth struct {
	IngressRate  uint64 `json:"ingressRate"`
	IngressBurst uint64 `json:"ingressBurst"`
	EgressRate   uint64 `json:"egressRate"`
	EgressBurst  uint64 `json:"egressBurst"`
}

// options are the port options of the limits: what the switch sends to
// the pod (its ingress) is the port's egress. A rate of zero is no limit,
// as in the reference plugin; a burst of zero with a rate is the
// switch's default burst.
func (b *bandwidth) options() string {
	if b == nil {
		return ""
	}
	var s strings.Builder
	for _, o := range []struct {
		rate, burst uint64
		dir         string
	}{{b.IngressRate, b.IngressBurst, "egress"}, {b.EgressRate, b.EgressBurst, "ingress"}} {
		if o.rate == 0 {
			continue
		}
		fmt.Fprintf(&s, ",%s-rate=%d", o.dir, o.rate)
		if o.burst != 0 {
			fmt.Fprintf(&s, ",%s-burst=%d", o.dir, o.burst)
		}
	}
	return s.String()
}

// parseConf decodes and checks stdin; its errors are CNI errors. A
// prevResult, if any, is parsed into PrevResult.
func parseConf(stdin []byte) (*netConf, error) {
	conf := &netConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		// Valid JSON with a value of the wrong type ("mtu": "1500") is
		// a configuration error, not a decoding one.
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, invalidConf(fmt.Sprintf("%q: a JSON %s where %s is wanted", te.Field, te.Value, jsonKind(te.Type)))
		}
		return nil, types.NewError(types.ErrDecodingFailure, "network configuration on stdin is not valid JSON", err.Error())
	}
	if conf.Socket == "" {
		conf.Socket = defaultSocket
	}
	if conf.Mode == "" {
		conf.Mode = defaultMode
	}
	if conf.MTU == 0 {
		conf.MTU = defaultMTU
	}
	switch {
	case !podMode(conf.Mode):
		return nil, invalidConf(fmt.Sprintf(`"mode": %q: want %s, as the switch's ports are`, conf.Mode, podModes()))
	case conf.MTU < tun.MinMTU || conf.MTU > tun.MaxMTU:
		return nil, invalidConf(fmt.Sprintf(`"mtu": %d: want %d to %d`, conf.MTU, tun.MinMTU, tun.MaxMTU))
	case !strings.HasPrefix(conf.Socket, "/"):
		return nil, invalidConf(fmt.Sprintf(`"socket": %q: want the absolute path of the switch's control socket (softnet switch --control)`, conf.Socket))
	case conf.IPAM.Type == "":
		return nil, invalidConf(`no "ipam": softnet-cni takes its addresses from an IPAM plugin; add e.g. "ipam": {"type": "host-local", "ranges": [[{"subnet": "198.18.1.0/24"}]]}`)
	}
	if bw := conf.RuntimeConfig.Bandwidth; bw != nil {
		if _, err := vswitch.ParsePort(conf.Mode + ":cni0" + bw.options()); err != nil {
			return nil, invalidConf(fmt.Sprintf(`runtimeConfig "bandwidth" %+v: %v`, *bw, err))
		}
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "prevResult cannot be parsed", err.Error())
	}
	conf.ipamStdin = stdin
	if conf.PodCIDRsFrom != "" {
		var err error
		if conf.ipamStdin, err = withNodeRanges(stdin, conf.PodCIDRsFrom); err != nil {
			return nil, err
		}
	}
	return conf, nil
}

// withNodeRanges returns stdin with its "ipam"'s "ranges" the node's pod
// CIDRs, as softnet agent wrote them to its status file: host-local's
// ranges come from the Node, not from a file written by hand. Without
// them yet (no agent, or a Node without pod CIDRs) it is an error to
// try again later.
func withNodeRanges(stdin []byte, status string) ([]byte, error) {
	if !strings.HasPrefix(status, "/") {
		return nil, invalidConf(fmt.Sprintf(`"podCIDRsFrom": %q: want the absolute path of softnet agent's status file (its --status)`, status))
	}
	cidrs, err := agentstatus.PodCIDRs(status)
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, "the node's pod CIDRs are not known yet: is softnet agent running?", err.Error())
	}
	var c map[string]any
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "network configuration on stdin is not valid JSON", err.Error())
	}
	ipam, ok := c["ipam"].(map[string]any)
	if !ok {
		return nil, invalidConf(`"ipam": want an object`)
	}
	if _, has := ipam["ranges"]; has {
		return nil, invalidConf(`"podCIDRsFrom" gives "ipam" its ranges: remove "ranges" from "ipam"`)
	}
	var ranges []any
	for _, p := range cidrs {
		ranges = append(ranges, []any{map[string]any{"subnet": p.String()}})
	}
	ipam["ranges"] = ranges
	b, err := json.Marshal(c)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "encode the IPAM configuration", err.Error())
	}
	return b, nil
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}

func invalidConf(msg string) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration: "+msg, "")
}

// Port names. The switch names ports uniquely, with at most
// tun.MaxNameLen bytes, and keeps nothing else about who asked for one;
// an attachment's port name is therefore derived from what identifies
// the attachment: "cn", 4 characters from the network's name and 9 from
// the network, CNI_CONTAINERID and CNI_IFNAME (hashed, lower-case
// base32). DEL finds the port from its arguments alone, and GC
// recognizes the network's ports by their first 6 characters and the
// live ones by the rest.
const (
	portPrefix   = "cn"
	networkChars = 4  // 20 bits: networks sharing a switch
	attachChars  = 9  // 45 bits: attachments of a network
	portNameLen  = 15 // = tun.MaxNameLen
)

var base32Lower = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func hashChars(n int, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return base32Lower.EncodeToString(sum[:])[:n]
}

// networkPrefix is the prefix of every port of the network.
func networkPrefix(network string) string {
	return portPrefix + hashChars(networkChars, network)
}

// portName is the name of the attachment's port on the switch.
func portName(network, containerID, ifname string) string {
	return networkPrefix(network) + hashChars(attachChars, network, containerID, ifname)
}

// isNetworkPort says whether name has the shape of a port of network.
func isNetworkPort(network, name string) bool {
	rest, ok := strings.CutPrefix(name, networkPrefix(network))
	if !ok || len(name) != portNameLen {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}
