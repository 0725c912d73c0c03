// Command softnet-cni is a CNI plugin (spec 0.4.0, 1.0.0 and 1.1.0) that
// attaches containers to a running `softnet switch` through its control
// API: each attachment is a TUN or TAP port of the switch whose device,
// CNI_IFNAME, lives in the container's network namespace. Addresses come
// from a delegated IPAM plugin (host-local, for example); the plugin puts
// them and a default route on the device and, on a switch of TUN ports,
// routes each address to the port. See docs/kubernetes.md.
//
// Network configuration:
//
//	{"cniVersion": "1.1.0", "name": "pods", "type": "softnet-cni",
//	 "socket": "/run/softnet/softnet.sock", "mode": "tun", "mtu": 1500,
//	 "ipam": {"type": "host-local", "ranges": [[{"subnet": "198.18.1.0/24"}]]}}
//
// socket, mode (tun or tap) and mtu have those defaults; other keys are
// ignored.
//
// The switch knows an attachment by its port's name, derived from the
// network's name, CNI_CONTAINERID and CNI_IFNAME (see portName): DEL and
// GC need nothing else, not even the namespace, which may be gone.
package main

import (
	"encoding/json"
	"io"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"softnet.dev/internal/buildinfo"
)

// supported are the spec versions the plugin speaks; VERSION says which
// softnet the plugin is as well.
var supported = withBuild{version.PluginSupports("0.4.0", "1.0.0", "1.1.0")}

// withBuild is the plugin's VERSION answer: the spec's (cniVersion,
// supportedVersions) and "softnet", the plugin's build (as `softnet
// version --json` prints the switch's). Runtimes ignore the key they do
// not know.
type withBuild struct{ version.PluginInfo }

func (v withBuild) Encode(w io.Writer) error {
	return json.NewEncoder(w).Encode(struct {
		CNIVersion string         `json:"cniVersion"`
		Supported  []string       `json:"supportedVersions"`
		Softnet    buildinfo.Info `json:"softnet"`
	}{version.Current(), v.SupportedVersions(), buildinfo.Get()})
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, Status: cmdStatus, GC: cmdGC},
		supported, "softnet-cni: attaches containers to a softnet switch")
}
