package afxdp

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/engine"
	"softnet.dev/internal/netnstest"
	"softnet.dev/port"
	"softnet.dev/program"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Println("goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testTimeout bounds every wait for the kernel.
const testTimeout = 20 * time.Second

// guest is a namespace whose eth0 is one end of a veth pair; the other
// end, host, is in the switch's namespace.
type guest struct {
	ns   *netnstest.NS
	host string
	v4   netip.Prefix
	v6   netip.Prefix
}

// rig is a switch namespace and guests joined to it by veth pairs,
// every one removed at the end of the test.
type rig struct {
	t      *testing.T
	sw     *netnstest.NS
	guests []*guest
}

func newRig(t *testing.T, n int, mtu int) *rig {
	t.Helper()
	return newRigQueues(t, n, mtu, 0)
}

// newRigQueues makes veth pairs with queues queues each (0: the
// kernel's default, one).
func newRigQueues(t *testing.T, n, mtu, queues int) *rig {
	t.Helper()
	r := &rig{t: t, sw: netnstest.New(t)}
	for i := range n {
		g := &guest{
			ns:   netnstest.New(t),
			host: fmt.Sprintf("h%d", i+1),
			v4:   netip.MustParsePrefix(fmt.Sprintf("198.18.0.%d/24", i+1)),
			v6:   netip.MustParsePrefix(fmt.Sprintf("2001:db8::%d/64", i+1)),
		}
		add := []string{"ip", "link", "add", g.host}
		if queues > 0 {
			add = append(add, "numtxqueues", fmt.Sprint(queues), "numrxqueues", fmt.Sprint(queues))
		}
		add = append(add, "type", "veth", "peer", "name", "eth0", "netns", g.ns.Name)
		if queues > 0 {
			add = append(add, "numtxqueues", fmt.Sprint(queues), "numrxqueues", fmt.Sprint(queues))
		}
		r.run(r.sw, add...)
		if mtu != 0 {
			r.run(r.sw, "ip", "link", "set", g.host, "mtu", fmt.Sprint(mtu))
			r.run(g.ns, "ip", "link", "set", "eth0", "mtu", fmt.Sprint(mtu))
		}
		r.run(g.ns, "ip", "link", "set", "eth0", "address", fmt.Sprintf("02:00:00:00:00:%02x", i+1))
		r.run(r.sw, "ip", "link", "set", g.host, "up")
		r.run(g.ns, "ip", "link", "set", "eth0", "up")
		g.ns.AddAddr(t, "eth0", g.v4)
		g.ns.AddAddr(t, "eth0", g.v6)
		r.guests = append(r.guests, g)
	}
	return r
}

func (r *rig) run(ns *netnstest.NS, args ...string) string {
	r.t.Helper()
	out, err := ns.Exec(args...)
	if err != nil {
		r.t.Fatalf("%s: %v: %s", ns.Name, err, out)
	}
	return out
}

// newPool returns a pool whose leak check runs at the end of the test,
// after every port is closed (cleanups run last registered first).
func newPool(t *testing.T, classes ...buffer.ClassConfig) *buffer.Pool {
	t.Helper()
	if len(classes) == 0 {
		classes = []buffer.ClassConfig{{Room: 2048, Count: 2048}, {Room: 65536, Count: 64}}
	}
	pool, err := buffer.NewPool(buffer.Config{Classes: classes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Close(); err != nil {
			t.Errorf("pool: %v", err)
		}
	})
	return pool
}

// open opens an afxdp port on the guest's host end.
func (r *rig) open(pool *buffer.Pool, g *guest, cfg Config) *Port {
	r.t.Helper()
	cfg.Name, cfg.NetNS, cfg.Pool = g.host, r.sw.Name, pool
	p, err := Open(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// bridge runs an engine with a learning bridge between the ports; the
// engine closes them at the end of the test.
func (r *rig) bridge(pool *buffer.Pool, workers int, ports ...port.Port) *engine.Engine {
	r.t.Helper()
	// Busy polling as the switch does it (--busy-poll's default).
	e, err := engine.New(engine.Config{Pool: pool, Workers: workers, BusyPoll: 200 * time.Microsecond, Programs: []program.Program{program.NewBridge(program.BridgeConfig{})}}, ports...)
	if err != nil {
		for _, p := range ports {
			p.CloseInto(nil)
		}
		r.t.Fatal(err)
	}
	e.Start()
	r.t.Cleanup(func() {
		if err := e.Close(); err != nil {
			r.t.Errorf("engine close: %v", err)
		}
	})
	// Until a worker's first round has filled a queue's fill ring, the
	// kernel has no frame for what arrives on it (a counted drop), and a
	// test's first ping could meet that.
	deadline := time.Now().Add(testTimeout)
	for _, p := range ports {
		xp, ok := p.(*Port)
		for ok && time.Now().Before(deadline) {
			if s := xp.Stats(); s.FillTarget > 0 && s.Lent >= s.FillTarget {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return e
}

// ping pings dst from g and fails the test unless every reply came.
func (r *rig) ping(g *guest, dst netip.Addr, count int) {
	r.t.Helper()
	netnstest.RequireTools(r.t, "ping")
	out, err := g.ns.ExecTimeout(testTimeout, "ping", "-c", fmt.Sprint(count), "-i", "0.05", "-W", "5", dst.String())
	if err != nil || !strings.Contains(out, fmt.Sprintf("%d received", count)) {
		r.t.Fatalf("ping %v from %s: %v\n%s", dst, g.ns.Name, err, out)
	}
}

// Ping through two ports, with the program in each XDP mode; the ports
// share one UMEM.
func TestPing(t *testing.T) {
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			r := newRig(t, 2, 0)
			pool := newPool(t)
			a := r.open(pool, r.guests[0], Config{Mode: mode})
			b := r.open(pool, r.guests[1], Config{Mode: mode})
			got, zc, sg := a.Mode()
			t.Logf("mode %v zero-copy %v multi-buffer %v, %d queues", got, zc, sg, a.Info().Queues)
			if got != mode || zc {
				t.Fatalf("mode %v, zero-copy %v: want %v in copy mode (veth)", got, zc, mode)
			}
			umems.Lock()
			shared := len(umems.m) == 1 && umems.m[umemKey{pool, a.class, false}] != nil && len(umems.m[umemKey{pool, a.class, false}].members) == 2
			umems.Unlock()
			if !shared {
				t.Fatal("the ports do not share one UMEM")
			}
			r.bridge(pool, 1, a, b)
			r.ping(r.guests[0], r.guests[1].v4.Addr(), 5)
			r.ping(r.guests[1], r.guests[0].v6.Addr(), 5)
		})
	}
}

// A veth has no zero-copy AF_XDP, and zero-copy takes only aligned
// frames: asking for it is a clear error either way.
func TestZeroCopyRefused(t *testing.T) {
	r := newRig(t, 1, 0)
	for _, c := range []struct {
		room int
		want string
	}{{1920, "the driver has no zero-copy"}, {2048, "zero-copy needs UMEM frames of 2048 or 4096 bytes"}} {
		pool := newPool(t, buffer.ClassConfig{Room: c.room, Count: 256})
		_, err := Open(Config{Name: r.guests[0].host, NetNS: r.sw.Name, Pool: pool, ZeroCopy: ZeroCopyOn})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("zero-copy with %d-byte frames on a veth: %v, want %q", pool.Slab(0).Frame, err, c.want)
		}
	}
}

// Frames of 2048 bytes are the kernel's aligned chunks, whose
// descriptors carry plain addresses.
func TestAlignedFrames(t *testing.T) {
	r := newRig(t, 2, 0)
	pool := newPool(t, buffer.ClassConfig{Room: 1920, Count: 1024})
	if f := pool.Slab(0).Frame; !aligned(f) {
		t.Fatalf("frames of %d bytes", f)
	}
	a := r.open(pool, r.guests[0], Config{})
	b := r.open(pool, r.guests[1], Config{})
	r.bridge(pool, 1, a, b)
	r.ping(r.guests[0], r.guests[1].v4.Addr(), 3)
	transfer(t, r.guests[1], r.guests[0], r.guests[0].v6.Addr(), 5041, 8<<20)
}

// A link set down drops what is sent to it as DEV_READY, and forwarding
// resumes when it is up again.
func TestLinkDownUp(t *testing.T) {
	r := newRig(t, 2, 0)
	pool := newPool(t)
	a := r.open(pool, r.guests[0], Config{})
	b := r.open(pool, r.guests[1], Config{})
	r.bridge(pool, 1, a, b)
	g1, g2 := r.guests[0], r.guests[1]
	r.ping(g1, g2.v4.Addr(), 2)
	r.run(r.sw, "ip", "link", "set", g2.host, "down")
	waitFor(t, "the port sees its link down", func() bool { return b.link.down.Load() })
	g1.ns.ExecTimeout(testTimeout, "ping", "-c", "2", "-i", "0.1", "-W", "1", g2.v4.Addr().String())
	if d := b.Stats().TxDrops[drop.DevReady]; d == 0 {
		t.Fatalf("nothing dropped as DEV_READY toward a link that is down: %v", b.Stats().TxDrops)
	}
	r.run(r.sw, "ip", "link", "set", g2.host, "up")
	waitFor(t, "the port sees its link up", func() bool { return !b.link.down.Load() })
	r.ping(g1, g2.v4.Addr(), 3)
}
