//go:build linux

package vhostuser

import "fmt"

// txRoute is the ring toward the guest that a transmit queue fills, and
// whether another transmit queue fills it too (then they take turns on
// the ring's txMu). A route is immutable; remapTx replaces it whole.
type txRoute struct {
	v      *vring
	shared bool
}

// remapTx maps the transmit queues onto the rings toward the guest that
// run, after one of them started or stopped. The engine's worker w
// always transmits on queue w, but a guest enables as many queue pairs as
// it likes (Linux: one per vCPU, or what ethtool -L sets): a queue whose
// own ring runs fills it, and the others are dealt out over the running
// rings in turn, so that every worker's packets reach the guest. (Open
// vSwitch maps its vhost-user transmit queues the same way.) With no
// ring running every queue keeps its own, whose packets drop as
// DEV_READY.
//
// Only the control plane calls it, with the ring that changed locked: it
// reads the other rings' run fields unlocked, which only the control
// plane writes. A worker in the middle of a burst on its old route
// finishes it under that ring's lock; the new route holds from its next
// burst.
func (p *Port) remapTx() {
	routes := make([]*vring, len(p.txqs))
	var running []*vring
	for i := range p.txqs {
		if own := p.rings[2*i]; own.run != nil {
			routes[i] = own
			running = append(running, own)
		}
	}
	users := make(map[*vring]int, len(routes))
	k := 0
	for i := range routes {
		switch {
		case routes[i] != nil:
		case len(running) == 0:
			routes[i] = p.rings[2*i]
		default:
			routes[i] = running[k%len(running)]
			k++
		}
		users[routes[i]]++
	}
	changed := false
	for i, q := range p.txqs {
		next := txRoute{v: routes[i], shared: users[routes[i]] > 1}
		if *q.route.Load() != next {
			q.route.Store(&next)
			changed = true
		}
	}
	if changed {
		p.log.Debug("vhost-user transmit queues mapped onto the running rings", "rings", p.txRings())
	}
}

// txRings describes where each transmit queue sends, for logs: queue i
// sends on ring txRings()[i].
func (p *Port) txRings() string {
	s := ""
	for i, q := range p.txqs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(q.route.Load().v.index)
	}
	return s
}
