package tun

import (
	"errors"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkState is what Open found of a device before touching it.
type linkState struct {
	exists bool
	up     bool
	mtu    int
	kind   string // IFLA_INFO_KIND: "tun" for TUN and TAP devices
}

// newNetlink returns a rtnetlink handle whose socket is bound to the
// calling thread's namespace, for good: the handle keeps working in the
// device's namespace after the thread is switched back.
func newNetlink() (*netlink.Handle, error) {
	return netlink.NewHandle(unix.NETLINK_ROUTE)
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

func lookup(nl *netlink.Handle, name string) (linkState, error) {
	link, err := nl.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return linkState{}, nil
		}
		return linkState{}, err
	}
	a := link.Attrs()
	kind := link.Type()
	if _, ok := link.(*netlink.Tuntap); ok {
		kind = "tun"
	}
	return linkState{exists: true, up: a.Flags&net.FlagUp != 0, mtu: a.MTU, kind: kind}, nil
}

// waitGone polls until the device is gone, for at most timeout. Closing
// the last file of a non-persistent device unregisters it before close
// returns; the polling covers a file reference held elsewhere for a
// moment (a concurrent fork that has not yet closed its CLOEXEC copy).
func waitGone(nl *netlink.Handle, name string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := lookup(nl, name)
		if err != nil {
			return false, err
		}
		if !st.exists {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}
