package vswitch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"softnet.dev/internal/dpdk"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/internal/vswitch/portkind/vhostkind"
	"softnet.dev/vhostuser"
)

// DPDK's testpmd drives softnet's vhost-user ports through its own
// virtio-user front-end: the virtio-net driver of a DPDK application,
// speaking vhost-user over the port's socket and sharing its hugepage
// memory, as a VM's QEMU would. (A VM's own QEMU and Linux guest drive
// them in qemu_linux_test.go.)

// testpmdMemMiB is the hugepage memory a testpmd takes (-m).
const testpmdMemMiB = 256

// testpmd is a running dpdk-testpmd.
type testpmd struct {
	*dpdk.Process
}

// syncBuffer is a bytes.Buffer for a process's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startTestpmd runs testpmd on two lcores with one virtio-user port per
// socket, forwarding in mode (icmpecho, io, ...), until the test ends or
// stop is called. Its hugepages come from a hugetlbfs mount of its own;
// its files there and its runtime directory are removed afterwards.
func startTestpmd(t *testing.T, mode string, sockets ...string) *testpmd {
	t.Helper()
	return startTestpmdQueues(t, mode, 1, sockets...)
}

// startTestpmdQueues is startTestpmd with queues queue pairs per port.
func startTestpmdQueues(t *testing.T, mode string, queues int, sockets ...string) *testpmd {
	t.Helper()
	return startTestpmdWith(t, mode, queues, "", nil, sockets...)
}

// startTestpmdWith is startTestpmd with queues queue pairs per port,
// more virtio-user options (server=1: testpmd listens, the port
// connects) and more testpmd arguments.
func startTestpmdWith(t *testing.T, mode string, queues int, vdevOpts string, args2 []string, sockets ...string) *testpmd {
	t.Helper()
	netnstest.RequireTools(t, "dpdk-testpmd")
	huge := hugepages(t, testpmdMemMiB)
	cfg := dpdk.Config{Huge: huge, MemMiB: testpmdMemMiB}
	for i, s := range sockets {
		cfg.Vdevs = append(cfg.Vdevs, fmt.Sprintf("net_virtio_user%d,path=%s,queues=%d,queue_size=256,mac=02:dd:00:00:00:%02x%s", i, s, queues, i+1, vdevOpts))
	}
	q := strconv.Itoa(queues)
	cfg.Args = append([]string{"--forward-mode=" + mode, "--auto-start", "--nb-cores=1", "--rxq=" + q, "--txq=" + q, "--total-num-mbufs=8192"}, args2...)
	p, err := dpdk.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pmd := &testpmd{p}
	t.Cleanup(func() { pmd.stop(t) })
	return pmd
}

// stop asks testpmd to quit (in non-interactive mode it waits for a
// line on its input), kills it, by its PID, if it does not, and removes
// its files.
func (p *testpmd) stop(t *testing.T) {
	if err := p.Stop(false, 20*time.Second); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		t.Logf("dpdk-testpmd output:\n%s", p.Output())
	}
}

// hugepages makes mib MiB of 2 MiB hugepages free, raising
// vm.nr_hugepages for the test if it must, and mounts a hugetlbfs on a
// private directory; both are undone when the test ends.
func hugepages(t *testing.T, mib int) *dpdk.Hugepages {
	t.Helper()
	h, err := dpdk.ReserveHugepages(mib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Release(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// vhostView is a vhost-user port of the switch, as its kind opened it.
type vhostView struct {
	PortView
	VhostUser *vhostuser.Port
}

// vhostPort returns the switch's vhost-user port named name, whose
// counters a failed test logs.
func vhostPort(t *testing.T, sw *Switch, name string) vhostView {
	t.Helper()
	for _, pv := range sw.Ports() {
		if vp, ok := pv.Port.(*vhostuser.Port); ok && pv.Spec.Name == name {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("vhost-user port %s at the end: %+v", name, vp.Stats())
				}
			})
			return vhostView{pv, vp}
		}
	}
	t.Fatalf("no vhost-user port %s", name)
	return vhostView{}
}

// vhostSwitch runs a switch that bridges a TAP port in g's namespace
// (address addr/24) with a vhost-user port listening on sock.
func vhostSwitch(t *testing.T, g *guest, name, sock, addr string) (*Switch, func() *Report) {
	t.Helper()
	return vhostSwitchWorkers(t, g, name, sock, addr, 1, "")
}

// vhostSwitchWorkers is vhostSwitch with workers workers, and as many
// queues on each port, and more options for the vhost-user port.
func vhostSwitchWorkers(t *testing.T, g *guest, name, sock, addr string, workers int, opts string) (*Switch, func() *Report) {
	t.Helper()
	cfg := Config{Workers: workers}
	for _, spec := range []string{"tap:" + g.dev + ",netns=" + g.ns.Name, "vhost-user:" + name + ",socket=" + sock + opts} {
		p, err := ParsePort(spec)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	logs := &syncBuffer{}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, func() {
		if t.Failed() {
			t.Logf("switch %s's log:\n%s", name, logs.String())
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := json.Marshal(stop())
			t.Logf("switch %s's report: %s", name, b)
		}
	})
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(addr+"/24"))
	return sw, stop
}

// waitPing pings to from g until one answer comes: testpmd takes a few
// seconds to map its memory and start its ports.
func waitPing(t *testing.T, g *guest, to string, pmd *testpmd, vp vhostView) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := g.ns.ExecTimeout(5*time.Second, "ping", "-c", "1", "-W", "1", to); err == nil {
			return
		}
		if pmd.Exited() {
			t.Fatalf("dpdk-testpmd exited before %s answered; port %s: %+v\ntestpmd:\n%s", to, vp.Spec.Name, vp.VhostUser.Stats(), pmd.Output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from %s within 60s; port %s: %+v\ntestpmd:\n%s", to, vp.Spec.Name, vp.VhostUser.Stats(), pmd.Output())
		}
	}
}

// pingTen sends 10 pings from g to to, one at a time, each of which
// must be answered. Not one ping -c 10: once it has sent its last
// request it waits only twice the longest round trip so far (iputils'
// linger), and on a loaded machine, with testpmd's busy lcore sharing a
// core, one reply can take longer than that (seen: 284 ms after replies
// of 2 ms; and a reply that reached the port after ping had exited): a
// late reply counted as a lost one. Each ping here waits for its own
// reply, a few seconds at most; a lost one still fails.
func pingTen(t *testing.T, g *guest, to string) {
	t.Helper()
	for i := range 10 {
		if out, err := g.ns.ExecTimeout(10*time.Second, "ping", "-c", "1", "-W", "5", to); err != nil {
			t.Fatalf("ping %d of 10 to %s: %v\n%s", i+1, to, err, out)
		}
	}
}

// TestVhostUserTestpmdICMPEcho: a namespace behind a TAP port pings
// across the bridge to DPDK's testpmd in icmpecho mode on a vhost-user
// port, which answers ARP and echo requests: 10 of 10.
func TestVhostUserTestpmdICMPEcho(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	g := newGuests(t, 1)[0]
	sock := filepath.Join(t.TempDir(), "vu1.sock")
	sw, stop := vhostSwitch(t, g, "vu1", sock, "198.18.23.1")
	vp := vhostPort(t, sw, "vu1")
	if st := vhostPort(t, sw, "vu1").State; st.Summary != "no front-end connected" || len(st.Fields) != 1 || st.Fields[0] != (portkind.Field{Key: "frontend", Value: "waiting"}) {
		t.Errorf("the state of a port no front-end connected to: %+v", st)
	}
	for run := range 2 {
		// The second run is a front-end restarted while the switch
		// runs: traffic resumes. It also negotiates no mergeable
		// buffers, so each packet must fit one of testpmd's.
		opts := ""
		if run == 1 {
			opts = ",mrg_rxbuf=0"
		}
		pmd := startTestpmdWith(t, "icmpecho", 1, opts, nil, sock)
		waitPing(t, g, "198.18.23.2", pmd, vp)
		pingTen(t, g, "198.18.23.2")
		s := vp.VhostUser.Stats()
		if mrg := s.Features&(1<<15) != 0; mrg != (run == 0) {
			t.Errorf("run %d: features %#x: VIRTIO_NET_F_MRG_RXBUF negotiated %v", run, s.Features, mrg)
		}
		if s.RxPackets < 10*uint64(run+1) || s.TxPackets < 10*uint64(run+1) || s.BadChains != 0 || s.Connects != uint64(run+1) || s.RunningRings != 2 {
			t.Errorf("run %d: vhost-user port stats %+v: want at least 10 packets each way per run, no bad chains, one connect per run", run, s)
		}
		// The port's state says the front-end is there, with what it
		// negotiated; the switch's fdb has testpmd's MAC on the port.
		st := vhostPort(t, sw, "vu1").State
		want := []portkind.Field{{Key: "frontend", Value: "connected"}, {Key: "queue_pairs_enabled", Value: "1 of 1"},
			{Key: "features", Value: strings.Join(vhostuser.FeatureNames(s.Features), " ")}, {Key: "feature_bits", Value: fmt.Sprintf("%#x", s.Features)}}
		if st.Summary != "front-end connected, 1 of 1 queue pairs enabled" || !slices.Equal(st.Fields, want) ||
			strings.Contains(want[2].Value, "mrg_rxbuf") != (run == 0) || !strings.Contains(want[2].Value, "version_1") {
			t.Errorf("run %d: state %+v, want %+v", run, st, want)
		}
		onPort := map[string]int{}
		for _, e := range sw.FDB() {
			if e.Static || e.Dst != "" || e.Age < 0 || e.Age > time.Minute {
				t.Errorf("run %d: fdb entry %+v: want a learned station of the bridge", run, e)
			}
			onPort[e.Port]++
		}
		if onPort["vu1"] != 1 || onPort[g.dev] != 1 || len(onPort) != 2 {
			t.Errorf("run %d: fdb %+v: want testpmd's station on vu1 and the guest's on %s", run, sw.FDB(), g.dev)
		}
		pmd.stop(t)
		waitFor(t, 30*time.Second, "disconnect of the front-end", func() bool { return !vp.VhostUser.Connected() })
	}
	rep := stop()
	for _, d := range rep.Devices {
		if vs, ok := d.Own.(*vhostkind.Counters); d.Port == "vu1" && (!ok || d.RxPackets != vs.RxPackets) {
			t.Errorf("report's counters for vu1: %+v", d)
		}
	}
}

// TestVhostUserTestpmdClientMode: the port connects to testpmd's
// virtio-user in server mode (as to a VM's QEMU that listens), and again
// after testpmd restarts, with the switch running.
func TestVhostUserTestpmdClientMode(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	g := newGuests(t, 1)[0]
	sock := filepath.Join(t.TempDir(), "vu1.sock")
	sw, _ := vhostSwitchWorkers(t, g, "vu1", sock, "198.18.27.1", 1, ",mode=client")
	vp := vhostPort(t, sw, "vu1")
	for run := range 2 {
		pmd := startTestpmdWith(t, "icmpecho", 1, ",server=1", nil, sock)
		waitPing(t, g, "198.18.27.2", pmd, vp)
		pingTen(t, g, "198.18.27.2")
		pmd.stop(t)
		waitFor(t, 30*time.Second, "disconnect of the front-end", func() bool { return !vp.VhostUser.Connected() })
		// At least one connect per run: a dial while the old testpmd
		// still listens, exiting, connects too (to its backlog).
		if s := vp.VhostUser.Stats(); s.Connects < uint64(run+1) {
			t.Errorf("run %d: %d connects", run, s.Connects)
		}
		os.Remove(sock) // in case testpmd left its socket file behind
	}
}

// TestVhostUserTestpmdWire: two switches, each with a TAP guest and a
// vhost-user port, and testpmd forwarding between a virtio-user port on
// each (io mode) as a wire: the guests ping each other and move a file
// whose checksum is checked. (Both ports on one switch would be a bridge
// loop.)
func TestVhostUserTestpmdWire(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	gs := newGuests(t, 2)
	dir := t.TempDir()
	socks := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	var ports []vhostView
	for i, g := range gs {
		g.v4 = fmt.Sprintf("198.18.24.%d", i+1)
		sw, _ := vhostSwitch(t, g, fmt.Sprintf("vu%d", i+1), socks[i], g.v4)
		ports = append(ports, vhostPort(t, sw, fmt.Sprintf("vu%d", i+1)))
	}
	pmd := startTestpmd(t, "io", socks...)
	waitPing(t, gs[0], gs[1].v4, pmd, ports[0])
	pingTen(t, gs[0], gs[1].v4)
	pingTen(t, gs[1], gs[0].v4)
	transfer(t, gs[0], gs[1], gs[1].v4, 5023, 16<<20)
	for _, vp := range ports {
		if s := vp.VhostUser.Stats(); s.BadChains != 0 || s.BrokenRings != 0 {
			t.Errorf("port %s: %+v", vp.Spec.Name, s)
		}
	}
	pmd.stop(t)
}

// TestVhostUserTestpmdMultiQueue: a switch of two workers and a
// vhost-user port of two queue pairs (multiqueue negotiated), testpmd's
// virtio-user starting both, with checksum and TCP segmentation offloads
// negotiated both ways: ARP and pings are answered.
func TestVhostUserTestpmdMultiQueue(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	g := newGuests(t, 1)[0]
	sock := filepath.Join(t.TempDir(), "vu1.sock")
	sw, _ := vhostSwitchWorkers(t, g, "vu1", sock, "198.18.25.1", 2, "")
	vp := vhostPort(t, sw, "vu1")
	// Receive offloads UDP and TCP checksums and LRO (0x1c) ask for
	// GUEST_CSUM and GUEST_TSO4/6; transmit offloads UDP and TCP
	// checksums and TSO (0x2c) for CSUM and HOST_TSO4/6. (virtio has no
	// IPv4 header checksum offload.)
	pmd := startTestpmdWith(t, "icmpecho", 2, "", []string{"--rx-offloads=0x1c", "--tx-offloads=0x2c"}, sock)
	waitPing(t, g, "198.18.25.2", pmd, vp)
	s := vp.VhostUser.Stats()
	if s.RunningRings != 4 {
		t.Fatalf("%d rings running, want 4 (two queue pairs)", s.RunningRings)
	}
	const csum, guestCsum, guestTSO4, hostTSO4 = 1 << 0, 1 << 1, 1 << 7, 1 << 11
	if want := uint64(csum | guestCsum | guestTSO4 | hostTSO4); s.Features&want != want {
		t.Errorf("features %#x, want the checksum and TSO offloads (%#x)", s.Features, want)
	}
	pingTen(t, g, "198.18.25.2")
	pmd.stop(t)
}

// Without dpdk-testpmd the tests skip, naming the package to install,
// and fail instead when CI requires them.
func TestVhostUserTestpmdNeedsDPDK(t *testing.T) {
	out, passed := netnstest.RerunWithout(t, "TestVhostUserTestpmdICMPEcho", nil, "dpdk-testpmd")
	if !passed || !strings.Contains(out, "SKIP") || !strings.Contains(out, "Debian package dpdk-dev") {
		t.Errorf("without dpdk-testpmd: passed %v\n%s", passed, out)
	}
	out, passed = netnstest.RerunWithout(t, "TestVhostUserTestpmdICMPEcho", []string{netnstest.RequireEnv + "=1"}, "dpdk-testpmd")
	if passed || !strings.Contains(out, "dpdk-dev") {
		t.Errorf("without dpdk-testpmd, required: passed %v\n%s", passed, out)
	}
}

// TestVhostUserTestpmdTwoFrontends: two virtio-user devices of one
// testpmd on two vhost-user ports of one switch reach each other. testpmd
// sends a first burst on each (--tx-first) and forwards what each
// receives out of the other (io), so the same 64 frames circulate
// through the bridge until testpmd stops: bounded in count and time.
func TestVhostUserTestpmdTwoFrontends(t *testing.T) {
	netnstest.RequireTools(t, "dpdk-testpmd")
	netnstest.RequireRoot(t)
	dir := t.TempDir()
	socks := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	cfg := Config{Workers: 1}
	for i, s := range socks {
		p, err := ParsePort(fmt.Sprintf("vhost-user:vu%d,socket=%s", i+1, s))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	pmd := startTestpmdWith(t, "io", 1, "", []string{"--tx-first"}, socks...)
	a, b := vhostPort(t, sw, "vu1"), vhostPort(t, sw, "vu2")
	waitFor(t, 60*time.Second, "frames both ways between the two front-ends", func() bool {
		sa, sb := a.VhostUser.Stats(), b.VhostUser.Stats()
		return sa.RxPackets > 10000 && sa.TxPackets > 10000 && sb.RxPackets > 10000 && sb.TxPackets > 10000
	})
	pmd.stop(t)
	rep := stop()
	if rep.Bridge == nil || rep.Bridge.Learned < 2 {
		t.Errorf("bridge %+v: want both front-ends' MACs learned", rep.Bridge)
	}
	for _, vp := range []vhostView{a, b} {
		if s := vp.VhostUser.Stats(); s.BadChains != 0 || s.BrokenRings != 0 {
			t.Errorf("port %s: %+v", vp.Spec.Name, s)
		}
	}
}

// TestVhostUserTestpmdKilled: a front-end killed outright (as a VM's
// QEMU that crashes) while frames go round through two vhost-user ports
// of one switch, three times: each time the ports see it go, the next
// one connects and frames flow again, and at the end every buffer has
// come home (the leak check). testpmd forwards in mac mode with each
// port addressing the other, so the bridge learns each station on one
// port; the loop is bounded by the kills.
func TestVhostUserTestpmdKilled(t *testing.T) {
	netnstest.RequireTools(t, "dpdk-testpmd")
	netnstest.RequireRoot(t)
	dir := t.TempDir()
	socks := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	cfg := Config{Workers: 1}
	for i, s := range socks {
		p, err := ParsePort(fmt.Sprintf("vhost-user:vu%d,socket=%s", i+1, s))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	a, b := vhostPort(t, sw, "vu1"), vhostPort(t, sw, "vu2")
	macs := []string{"02:dd:00:00:00:01", "02:dd:00:00:00:02"} // startTestpmdWith's
	loop := []string{"--tx-first", "--eth-peer=0," + macs[1], "--eth-peer=1," + macs[0]}
	for run := range 4 {
		ra, rb := a.VhostUser.Stats().RxPackets, b.VhostUser.Stats().RxPackets
		pmd := startTestpmdWith(t, "mac", 1, "", loop, socks...)
		waitFor(t, 60*time.Second, fmt.Sprintf("run %d: frames from both front-ends", run), func() bool {
			return a.VhostUser.Stats().RxPackets > ra+10000 && b.VhostUser.Stats().RxPackets > rb+10000
		})
		if s := a.VhostUser.Stats(); s.Connects != uint64(run+1) {
			t.Errorf("run %d: %d connects", run, s.Connects)
		}
		if run == 3 {
			pmd.stop(t)
			break
		}
		if err := pmd.Kill(); err != nil { // by its PID: the testpmd this test started
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "disconnect of the killed front-end", func() bool {
			return !a.VhostUser.Connected() && !b.VhostUser.Connected()
		})
	}
	rep := stop()
	if rep == nil || rep.Leak != "ok" {
		t.Fatalf("report %+v: want the leak check balanced", rep)
	}
	for _, vp := range []vhostView{a, b} {
		if s := vp.VhostUser.Stats(); s.BadChains != 0 || s.Refused != 0 {
			t.Errorf("port %s: %+v", vp.Spec.Name, s)
		}
	}
}

// TestVhostUserTestpmdTwoProcesses: two test processes start testpmd at
// once, as go test runs packages in parallel and a lab run may start
// testpmd too, and each gets its hugepages. (Each counting free pages
// before its testpmd took them, both counted the same pages, and one
// testpmd's EAL failed: "Cannot init memory".)
func TestVhostUserTestpmdTwoProcesses(t *testing.T) {
	netnstest.RequireTools(t, "dpdk-testpmd")
	netnstest.RequireRoot(t)
	outs := make(chan string, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			b, err := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestVhostUserTestpmdTwoFrontends$", "-test.count=1", "-test.v").CombinedOutput()
			if err != nil || !bytes.Contains(b, []byte("--- PASS: TestVhostUserTestpmdTwoFrontends")) {
				outs <- fmt.Sprintf("%v\n%s", err, b)
				return
			}
			outs <- ""
		}()
	}
	for range 2 {
		if out := <-outs; out != "" {
			t.Errorf("one of two processes: %s", out)
		}
	}
}
