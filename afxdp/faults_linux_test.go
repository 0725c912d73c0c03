package afxdp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"softnet.dev/drop"
	"softnet.dev/port"
)

// xdpOn returns the id of the XDP program attached to dev in the switch
// namespace, 0 for none.
func (r *rig) xdpOn(dev string) uint32 {
	r.t.Helper()
	var id uint32
	if err := r.sw.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	}); err != nil {
		r.t.Fatal(err)
	}
	return id
}

// waitFor polls cond until it holds or the test's timeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, testTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A veth deleted under a live port takes that port down, with
// port.ErrDown, while the other ports keep forwarding; the pool balances
// when the engine closes.
func TestInterfaceDeleted(t *testing.T) {
	r := newRig(t, 3, 0)
	pool := newPool(t)
	var ports []port.Port
	for _, g := range r.guests {
		ports = append(ports, r.open(pool, g, Config{}))
	}
	e := r.bridge(pool, 1, ports...)
	r.ping(r.guests[1], r.guests[2].v4.Addr(), 2)
	r.run(r.sw, "ip", "link", "del", r.guests[0].host)
	// Traffic between the others wakes the worker, which finds the
	// deleted port's queue pending and its interface gone.
	go r.guests[1].ns.ExecTimeout(testTimeout, "ping", "-c", "50", "-i", "0.1", r.guests[2].v4.Addr().String())
	waitFor(t, "the deleted port goes down", func() bool { return e.Err(0) != nil })
	if err := e.Err(0); !errors.Is(err, port.ErrDown) || !strings.Contains(err.Error(), "interface deleted") {
		t.Fatalf("port error %v, want port.ErrDown for a deleted interface", err)
	}
	r.ping(r.guests[1], r.guests[2].v4.Addr(), 3)
	if e.Err(1) != nil || e.Err(2) != nil {
		t.Fatalf("other ports down: %v, %v", e.Err(1), e.Err(2))
	}
}

// passProg loads an XDP program that passes every frame, named name.
func passProg(t *testing.T, name string) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.XDP, License: "Dual MIT/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// An interface with someone else's XDP program is refused, clearly, and
// the program stays; so is one that a running softnet port holds.
func TestForeignProgramRefused(t *testing.T) {
	r := newRig(t, 2, 0)
	pool := newPool(t)
	g := r.guests[0]
	foreign := passProg(t, "not_softnet")
	var l link.Link
	if err := r.sw.Do(func() error {
		ifi, err := netlink.LinkByName(g.host)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: foreign, Interface: ifi.Attrs().Index, Flags: link.XDPGenericMode})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	id := r.xdpOn(g.host)
	_, err := Open(Config{Name: g.host, NetNS: r.sw.Name, Pool: pool})
	if err == nil || !strings.Contains(err.Error(), "not_softnet") || !strings.Contains(err.Error(), "did not attach") {
		t.Fatalf("open on a foreign program: %v", err)
	}
	if got := r.xdpOn(g.host); got != id {
		t.Fatalf("the foreign program %d was touched: now %d", id, got)
	}
	l.Close()

	// A second port on an interface a port already serves.
	p := r.open(pool, g, Config{})
	defer p.Close()
	_, err = Open(Config{Name: "again", Dev: g.host, NetNS: r.sw.Name, Pool: pool})
	if err == nil || !strings.Contains(err.Error(), "running softnet") {
		t.Fatalf("second port on %s: %v", g.host, err)
	}
}

// A softnet program left attached without a link (no softnet attaches
// it so; an older one or a hand-loaded copy could) is stale: Open
// removes it and attaches its own.
func TestStaleProgramRemoved(t *testing.T) {
	r := newRig(t, 2, 0)
	pool := newPool(t)
	g := r.guests[0]
	stale, err := loadProg(1, false, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.sw.Do(func() error {
		l, err := netlink.LinkByName(g.host)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, stale.prog.FD(), 1<<1) // XDP_FLAGS_SKB_MODE
	}); err != nil {
		t.Fatal(err)
	}
	staleID := r.xdpOn(g.host)
	stale.close() // the attachment keeps the program
	if staleID == 0 {
		t.Fatal("no stale program attached")
	}
	a := r.open(pool, g, Config{})
	b := r.open(pool, r.guests[1], Config{})
	if got := r.xdpOn(g.host); got == staleID || got == 0 {
		t.Fatalf("program %d on %s, the stale one was %d", got, g.host, staleID)
	}
	r.bridge(pool, 1, a, b)
	r.ping(r.guests[0], r.guests[1].v4.Addr(), 2)
}

// Closing a port detaches its program; so does the death of the process
// that held it, by SIGKILL, after which a new port opens on the
// interface. The child is this test binary, running TestHoldPort.
func TestDetachOnCloseAndCrash(t *testing.T) {
	r := newRig(t, 1, 0)
	pool := newPool(t)
	g := r.guests[0]
	p := r.open(pool, g, Config{})
	if r.xdpOn(g.host) == 0 {
		t.Fatal("no program attached")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if id := r.xdpOn(g.host); id != 0 {
		t.Fatalf("program %d still attached after Close", id)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldPort$", "-test.v")
	cmd.Env = append(os.Environ(), "SOFTNET_AFXDP_HOLD="+r.sw.Name+"/"+g.host)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		var all string
		for {
			n, err := out.Read(buf)
			all += string(buf[:n])
			if strings.Contains(all, "holding") {
				ready <- nil
				return
			}
			if err != nil {
				ready <- fmt.Errorf("child: %v: %s", err, all)
				return
			}
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		t.Fatal("the child did not open its port")
	}
	if r.xdpOn(g.host) == 0 {
		t.Fatal("the child's program is not attached")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitFor(t, "the dead child's program goes", func() bool { return r.xdpOn(g.host) == 0 })
	p = r.open(pool, g, Config{})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHoldPort is TestDetachOnCloseAndCrash's child: it opens a port and
// waits to be killed.
func TestHoldPort(t *testing.T) {
	arg := os.Getenv("SOFTNET_AFXDP_HOLD")
	if arg == "" {
		t.Skip("the child of TestDetachOnCloseAndCrash")
	}
	ns, dev, _ := strings.Cut(arg, "/")
	pool := newPool(t)
	p, err := Open(Config{Name: dev, NetNS: ns, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fmt.Println("holding")
	time.Sleep(testTimeout)
}

// Truncated and malformed frames a guest forges on its veth reach the
// port as they are, and are counted by the reason the engine's parser
// gives, not delivered; ping goes on.
func TestMalformedFramesCounted(t *testing.T) {
	r := newRig(t, 2, 0)
	pool := newPool(t)
	a := r.open(pool, r.guests[0], Config{})
	b := r.open(pool, r.guests[1], Config{})
	e := r.bridge(pool, 1, a, b)
	g1, g2 := r.guests[0], r.guests[1]
	r.ping(g1, g2.v4.Addr(), 1)
	eth := func(etherType uint16, rest ...byte) []byte {
		f := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, byte(etherType >> 8), byte(etherType)}
		return append(f, rest...)
	}
	truncated := eth(0x0800, 0x45, 0, 0, 40, 0, 0)                          // an IPv4 header cut short
	badVersion := eth(0x0800, append([]byte{0x95}, make([]byte, 39)...)...) // IP version 9
	g1.ns.Inject(t, "eth0", true, truncated, truncated, badVersion)
	waitFor(t, "the malformed frames are counted", func() bool {
		d := e.Stats().Ports[0].Drops
		return d[drop.HdrTrunc] >= 2 && d[drop.InvalidProto] >= 1
	})
	r.ping(g1, g2.v4.Addr(), 2)
}
