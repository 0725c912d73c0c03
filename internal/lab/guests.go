package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"time"
)

// guest is one side of a variant: a namespace with one device joining it
// to the datapath. Guest i has 198.18.i.1/24 and 2001:db8:i::1/64 and
// reaches the other's subnets through its device.
type guest struct {
	ns     string
	dev    string
	v4, v6 netip.Prefix // the guest's own address, with its subnet's length
}

// guestPair is the two guests of one variant: traffic goes from a to b.
type guestPair struct {
	a, b *guest
}

// newRunID returns the prefix of one run's namespaces,
// softnet-lab-<pid>-<random>: a leftover says whose it was, and
// concurrent runs never collide.
func newRunID() string {
	var rnd [3]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read does not fail on Linux
	return fmt.Sprintf("softnet-lab-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))
}

// nsName names the namespace of side 'a' or 'b' of variant number index.
func nsName(runID string, index int, side byte) string {
	return fmt.Sprintf("%s-%d%c", runID, index, side)
}

// newGuestPair creates the namespaces of variant number index and
// registers their removal.
func newGuestPair(runID string, index int, u *undoStack) (*guestPair, error) {
	mk := func(side byte, n int) (*guest, error) {
		g := &guest{
			ns:  nsName(runID, index, side),
			dev: fmt.Sprintf("lab-%c", side),
			v4:  netip.MustParsePrefix(fmt.Sprintf("198.18.%d.1/24", n)),
			v6:  netip.MustParsePrefix(fmt.Sprintf("2001:db8:%d::1/64", n)),
		}
		if err := addNamespace(g.ns); err != nil {
			return nil, err
		}
		u.push("namespace "+g.ns, func() error { return deleteNamespace(g.ns) })
		return g, nil
	}
	a, err := mk('a', 1)
	if err != nil {
		return nil, err
	}
	b, err := mk('b', 2)
	if err != nil {
		return nil, err
	}
	return &guestPair{a: a, b: b}, nil
}

func (p *guestPair) guests() [2]*guest { return [2]*guest{p.a, p.b} }

// configure gives each guest its addresses, sets its device up and routes
// the other guest's subnets through it, as an operator would. Routes are
// on-link: with TUN there is no neighbour resolution at all, and on veth
// and TAP the other guest answers ARP and neighbour solicitations for its
// own address whatever subnet they came from.
func (p *guestPair) configure() error {
	for _, g := range p.guests() {
		other := p.a
		if g == p.a {
			other = p.b
		}
		steps := [][]string{
			{"addr", "add", g.v4.String(), "dev", g.dev},
			{"-6", "addr", "add", g.v6.String(), "dev", g.dev, "nodad"},
			{"link", "set", g.dev, "up"},
			{"route", "add", other.v4.Masked().String(), "dev", g.dev},
			{"-6", "route", "add", other.v6.Masked().String(), "dev", g.dev},
		}
		for _, s := range steps {
			if err := ip(append([]string{"-n", g.ns}, s...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPath pings b from a until a reply comes, for up to 5 s: the
// datapath is up and, for softnet, its worker has forwarded a packet (and
// recorded its thread).
func (p *guestPair) checkPath(ctx context.Context, ipv6 bool) error {
	dst := p.b.addr(ipv6).String()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := ip("netns", "exec", p.a.ns, "ping", "-c", "1", "-W", "1", dst)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no path from %s to %s: %w", p.a.ns, p.b.ns, err)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// addr returns the guest's address of the family the traffic uses.
func (g *guest) addr(ipv6 bool) netip.Addr {
	if ipv6 {
		return g.v6.Addr()
	}
	return g.v4.Addr()
}
