package vswitch

import (
	"fmt"

	"softnet.dev/internal/vswitch/portkind/afxdpkind"
	"softnet.dev/internal/vswitch/portkind/tunkind"
	"softnet.dev/internal/vswitch/portkind/vhostkind"
	"softnet.dev/internal/vswitch/portkind/vxlankind"
)

// openConfigOf is what a port opens with in a switch of workers
// workers: its device's, socket's or overlay's configuration, as the
// golden files show it. It is the one place the golden tests reach into
// how a port is opened.
func openConfigOf(p PortSpec, workers int) string {
	q := p.Queues
	if q == 0 {
		q = workers
	}
	switch o := p.Options.(type) {
	case *vhostkind.Options:
		return fmt.Sprintf("vhostuser.Config%+v", o.Config(p.Name, p.Common, q))
	case *vxlankind.Options:
		return fmt.Sprintf("vxlan.Config%+v", o.Config(p.Name, p.Common, q))
	case *afxdpkind.Options:
		return fmt.Sprintf("afxdp.Config%+v", o.Config(p.Name, p.Common, q))
	case *tunkind.Options:
		return fmt.Sprintf("tun.Config%+v", o.Config(p.Name, p.Common, q))
	}
	return fmt.Sprintf("unknown kind %q", p.Kind)
}
