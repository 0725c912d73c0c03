package vswitch

import "fmt"

// openConfigOf is what a port opens with in a switch of workers
// workers: its device's, socket's or overlay's configuration, as the
// golden files show it. It is the one place the golden tests reach into
// how a port is opened.
func openConfigOf(p PortSpec, workers int) string {
	q := p.Queues
	if q == 0 {
		q = workers
	}
	switch {
	case p.VhostUser:
		return fmt.Sprintf("vhostuser.Config%+v", p.vhostUser(q))
	case p.VXLAN:
		return fmt.Sprintf("vxlan.Config%+v", p.vxlanConfig(q))
	}
	return fmt.Sprintf("tun.Config%+v", p.device(q))
}
