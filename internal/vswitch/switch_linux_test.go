package vswitch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
)

// guest is a test host: a namespace with one switch port in it.
type guest struct {
	ns   *netnstest.NS
	dev  string
	v4   string // the guest's address, e.g. 198.18.1.1
	v6   string
	net4 string // its subnet, routed to its port by the switch
	net6 string
}

func newGuests(t *testing.T, n int) []*guest {
	netnstest.RequireRoot(t)
	var gs []*guest
	for i := 1; i <= n; i++ {
		gs = append(gs, &guest{
			ns:   netnstest.New(t),
			dev:  fmt.Sprintf("sn%d", i),
			v4:   fmt.Sprintf("198.18.%d.1", i),
			v6:   fmt.Sprintf("2001:db8:%d::1", i),
			net4: fmt.Sprintf("198.18.%d.0/24", i),
			net6: fmt.Sprintf("2001:db8:%d::/64", i),
		})
	}
	return gs
}

func (g *guest) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := g.ns.Exec(args...)
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", g.ns.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// configure gives the guest its addresses and routes every other guest's
// subnets through its port, as an operator would with ip(8).
func (g *guest) configure(t *testing.T, all []*guest) {
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v4+"/24"))
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v6+"/64"))
	for _, o := range all {
		if o != g {
			g.run(t, "ip", "route", "add", o.net4, "dev", g.dev)
			g.run(t, "ip", "-6", "route", "add", o.net6, "dev", g.dev)
		}
	}
}

// startSwitch opens a switch with a TUN port in each guest and routes to
// each guest's subnets, and runs it until the returned stop is called.
func startSwitch(t *testing.T, gs []*guest, workers int, opts ...string) (stop func() *Report) {
	t.Helper()
	_, stop = startSwitchServices(t, gs, workers, nil, opts...)
	return stop
}

// startSwitchServices is startSwitch with built-in services.
func startSwitchServices(t *testing.T, gs []*guest, workers int, services []ServiceSpec, opts ...string) (sw *Switch, stop func() *Report) {
	t.Helper()
	return startSwitchConfig(t, gs, Config{Workers: workers, Services: services}, opts...)
}

// startSwitchConfig is startSwitch with cfg's services, filters and
// workers.
func startSwitchConfig(t *testing.T, gs []*guest, cfg Config, opts ...string) (sw *Switch, stop func() *Report) {
	t.Helper()
	for i, g := range gs {
		spec := "tun:" + g.dev + ",netns=" + g.ns.Name
		if i < len(opts) && opts[i] != "" {
			spec += "," + opts[i]
		}
		p, err := ParsePort(spec)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
		for _, pfx := range []string{g.net4, g.net6} {
			r, err := ParseRoute(pfx + "=" + g.dev)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Routes = append(cfg.Routes, r)
		}
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop = runSwitch(t, sw, func() {
		for _, g := range gs {
			if out, err := g.ns.Exec("ip", "link", "show", g.dev); err == nil {
				t.Errorf("%s: device %s left behind:\n%s", g.ns.Name, g.dev, out)
			}
		}
	})
	for _, g := range gs {
		g.configure(t, gs)
	}
	return sw, stop
}

// runSwitch runs sw until the returned stop is called (or the test
// ends), which checks that it stopped cleanly with every buffer home,
// then runs after.
func runSwitch(t *testing.T, sw *Switch, after func()) (stop func() *Report) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var rep *Report
	var runErr error
	done := make(chan struct{})
	go func() { rep, runErr = sw.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() *Report {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("switch did not stop")
			}
			if runErr != nil {
				t.Errorf("switch: %v", runErr)
			}
			if rep != nil && rep.Leak != "ok" {
				t.Errorf("leak check: %s", rep.Leak)
			}
			if after != nil {
				after()
			}
		})
		return rep
	}
	t.Cleanup(func() { stop() })
	return stop
}

func ping(t *testing.T, from *guest, to string) {
	t.Helper()
	netnstest.RequireTools(t, "ping")
	from.run(t, "ping", "-c", "3", "-i", "0.2", "-W", "2", to)
}

// transfer sends size bytes of a deterministic stream over TCP from one
// guest to another through the switch and checks the SHA-256 of what
// arrived.
func transfer(t *testing.T, from, to *guest, dst string, port int, size int64) {
	t.Helper()
	var ln net.Listener
	if err := to.ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(dst, fmt.Sprint(port)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(90 * time.Second))
		h := sha256.New()
		n, _ := io.Copy(h, c)
		if n != size {
			got <- []byte(fmt.Sprintf("short: %d bytes", n))
			return
		}
		got <- h.Sum(nil)
	}()
	var conn net.Conn
	if err := from.ns.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", net.JoinHostPort(dst, fmt.Sprint(port)), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(90 * time.Second))
	h := sha256.New()
	src := rand.New(rand.NewPCG(uint64(port), uint64(size)))
	buf := make([]byte, 1<<20)
	for sent := int64(0); sent < size; {
		chunk := buf[:min(int64(len(buf)), size-sent)]
		for i := 0; i < len(chunk); i += 8 {
			binary.LittleEndian.PutUint64(chunk[i:], src.Uint64())
		}
		h.Write(chunk)
		if _, err := conn.Write(chunk); err != nil {
			t.Fatalf("write after %d bytes: %v", sent, err)
		}
		sent += int64(len(chunk))
	}
	conn.Close()
	if sum := <-got; !bytes.Equal(sum, h.Sum(nil)) {
		t.Fatalf("received stream differs: %q", sum)
	}
}

func TestSwitchTUNGuests(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 1)
	ping(t, gs[0], gs[1].v4)
	ping(t, gs[1], gs[0].v6)
	start := time.Now()
	transfer(t, gs[0], gs[1], gs[1].v4, 5001, 256<<20)
	t.Logf("256 MiB over TCP/IPv4 in %v", time.Since(start))
	transfer(t, gs[1], gs[0], gs[0].v6, 5002, 32<<20)
	udpExchange(t, gs[0], gs[1], 200)
	rep := stop()
	if rep.Ports[0].RxPackets == 0 || rep.Ports[1].TxPackets == 0 {
		t.Fatalf("no traffic counted: %+v", rep.Ports)
	}
}

func TestSwitchMixedOffload(t *testing.T) {
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 1, "offload=on", "offload=off")
	// GSO super-packets from the offloading guest must be segmented in
	// software for the other, in both directions of the connection; the
	// other's segments are coalesced (GRO) for the offloading guest.
	transfer(t, gs[0], gs[1], gs[1].v4, 5003, 64<<20)
	transfer(t, gs[1], gs[0], gs[0].v6, 5004, 16<<20)
	checkOffloads(t, stop())
}

// checkOffloads checks that the report of a switch between an offloading
// port (0) and one without offloads (1) shows both ways of bridging them:
// segmentation toward port 1, coalescing toward port 0.
func checkOffloads(t *testing.T, rep *Report) {
	t.Helper()
	if len(rep.Devices) != 2 {
		t.Fatalf("report has %d devices, want 2", len(rep.Devices))
	}
	on, off := rep.Devices[0], rep.Devices[1]
	t.Logf("%s: GSO in %d, coalesced %d from %d; %s: segmented %d into %d", on.Port, on.GSOIn, on.Coalesced, on.CoalescedSegs, off.Port, off.Segmented, off.Segments)
	if off.Segmented == 0 || on.Coalesced == 0 || on.CoalescedSegs < 2*on.Coalesced {
		t.Errorf("offloads not bridged both ways: %+v, %+v", on, off)
	}
}

func TestSwitchMultiQueue(t *testing.T) {
	gs := newGuests(t, 2)
	startSwitch(t, gs, 2, "queues=2", "queues=2")
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			transfer(t, gs[0], gs[1], gs[1].v4, 5010+i, 16<<20)
		}()
	}
	wg.Wait()
}

func udpExchange(t *testing.T, from, to *guest, n int) {
	t.Helper()
	var rx *net.UDPConn
	if err := to.ns.Do(func() (err error) {
		rx, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(to.v4), Port: 6000})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var tx net.Conn
	if err := from.ns.Do(func() (err error) {
		tx, err = net.Dial("udp", net.JoinHostPort(to.v4, "6000"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	got := 0
	buf := make([]byte, 2048)
	for i := range n {
		if _, err := tx.Write([]byte(fmt.Sprintf("datagram %d", i))); err != nil {
			t.Fatal(err)
		}
		rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		k, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if string(buf[:k]) == fmt.Sprintf("datagram %d", i) {
			got++
		}
	}
	if got != n {
		t.Fatalf("%d of %d datagrams arrived intact", got, n)
	}
}

// TestSwitchDropsMalformed injects broken IP packets into a guest's TUN
// device with an AF_PACKET socket; the switch counts them as drops while
// good traffic keeps flowing.
func TestSwitchDropsMalformed(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 1)
	good := ipv4UDP(gs[0].v4, gs[1].v4)
	bad := [][]byte{
		good[:10],                                    // truncated IPv4 header
		append([]byte{0x75}, good[1:]...),            // version 7
		append([]byte{0x4f}, good[1:]...),            // IHL past the end
		{0x60, 0, 0, 0, 0xff, 0xff, 17, 64},          // IPv6 header cut short
		append(append([]byte{}, good[:20]...), 0, 1), // UDP header truncated
	}
	for range 20 {
		gs[0].ns.Inject(t, gs[0].dev, false, bad...)
	}
	ping(t, gs[0], gs[1].v4)
	rep := stop()
	d := rep.Ports[0].Drops
	if malformed := d[drop.HdrTrunc] + d[drop.InvalidProto] + d[drop.PktTooSmall]; malformed < 100 {
		t.Fatalf("only %d malformed packets counted (drops %v)", malformed, d)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ipv4UDP builds a small valid UDP/IPv4 packet.
func ipv4UDP(src, dst string) []byte {
	b := make([]byte, 28+4)
	b[0], b[3], b[8], b[9] = 0x45, byte(len(b)), 64, 17
	copy(b[12:16], net.ParseIP(src).To4())
	copy(b[16:20], net.ParseIP(dst).To4())
	binary.BigEndian.PutUint16(b[24:], 12)
	return b
}

func TestSwitchSurvivesDeletedDevice(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	stop := startSwitch(t, gs, 1)
	ping(t, gs[0], gs[1].v4)
	gs[1].run(t, "ip", "link", "del", gs[1].dev)
	// The rest keeps forwarding.
	ping(t, gs[0], gs[2].v4)
	ping(t, gs[0], gs[2].v4) // the dead port may take one round to be noticed
	rep := stop()
	if !rep.Ports[1].Down {
		t.Fatalf("deleted port not reported down: %+v", rep.Ports[1])
	}
}

func TestSwitchTAPBridge(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	cfg := Config{Workers: 1}
	for i, g := range gs {
		// As in TestSwitchMixedOffload: GRO and segmentation of frames.
		p, err := ParsePort("tap:" + g.dev + ",netns=" + g.ns.Name + map[bool]string{true: ",offload=off"}[i == 1])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *Report, 1)
	go func() { rep, _ := sw.Run(ctx); done <- rep }()
	stop := func() *Report {
		cancel()
		rep := <-done
		if rep == nil || rep.Leak != "ok" {
			t.Fatalf("report %+v", rep)
		}
		return rep
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	// One L2 segment: ARP and neighbour discovery cross the bridge.
	for i, g := range gs {
		g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(fmt.Sprintf("198.18.9.%d/24", i+1)))
		g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(fmt.Sprintf("2001:db8:9::%d/64", i+1)))
	}
	ping(t, gs[0], "198.18.9.2")
	ping(t, gs[1], "2001:db8:9::1")
	transfer(t, gs[0], gs[1], "198.18.9.2", 5005, 16<<20)
	transfer(t, gs[1], gs[0], "2001:db8:9::1", 5006, 16<<20)
	checkOffloads(t, stop())
}

// TestSwitchCommandSIGTERM runs the real binary and stops it with SIGTERM
// in the middle of a transfer: it must exit cleanly, remove its devices
// and report a balanced leak check.
func TestSwitchCommandSIGTERM(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	bin := buildSoftnet(t)
	statsFile := filepath.Join(t.TempDir(), "stats.json")
	socket := filepath.Join(t.TempDir(), "softnet.sock")
	args := []string{"switch", "--stats-json", statsFile, "--control", socket}
	for _, g := range gs {
		args = append(args, "--port", "tun:"+g.dev+",netns="+g.ns.Name, "--route", g.net4+"="+g.dev)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// Wait for the devices, then configure the guests.
	deadline := time.Now().Add(10 * time.Second)
	for _, g := range gs {
		for {
			if _, err := g.ns.Exec("ip", "link", "show", g.dev); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("device %s never appeared; stderr:\n%s", g.dev, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, g := range gs {
		g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v4+"/24"))
		for _, o := range gs {
			if o != g {
				g.run(t, "ip", "route", "add", o.net4, "dev", g.dev)
			}
		}
	}
	ping(t, gs[0], gs[1].v4)
	// softnet ctl sees the running switch.
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"ctl", "--socket", socket}, args...)...).Output()
		if err != nil {
			t.Fatalf("ctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var live Report
	if err := json.Unmarshal([]byte(ctl("stats", "--json")), &live); err != nil || live.Ports[0].RxPackets < 3 {
		t.Errorf("ctl stats --json: %v %+v", err, live.Ports)
	}
	if out := ctl("config"); !strings.Contains(out, "route "+gs[0].net4+"="+gs[0].dev+"\n") {
		t.Errorf("ctl config:\n%s", out)
	}
	if out := ctl("stats", "--watch", "100ms", "-n", "2"); strings.Count(out, "rx pkt/s") != 2 {
		t.Errorf("ctl stats --watch:\n%s", out)
	}
	// A transfer that the signal interrupts: a sink in one guest, a
	// writer in the other that stops at the first error or after 30 s.
	var ln net.Listener
	if err := gs[1].ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", gs[1].v4+":5099")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	var conn net.Conn
	if err := gs[0].ns.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", gs[1].v4+":5099", 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	written := make(chan int64, 1)
	go func() {
		conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		n, _ := io.Copy(conn, io.LimitReader(zeroReader{}, 1<<40))
		written <- n
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	// Generous for a loaded CI machine; a stop that waited out the
	// writer's 30 s deadline would still fail.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v to stop", took)
	}
	if err != nil {
		t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "leak check: ok") {
		t.Fatalf("no balanced leak check in:\n%s", stdout.String())
	}
	if b, err := os.ReadFile(statsFile); err != nil || !bytes.Contains(b, []byte(`"leak_check": "ok"`)) {
		t.Fatalf("stats json: %v\n%s", err, b)
	}
	for _, g := range gs {
		if out, err := g.ns.Exec("ip", "link", "show", g.dev); err == nil {
			t.Errorf("device %s left behind:\n%s", g.dev, out)
		}
	}
	if _, err := os.Stat(socket); err == nil {
		t.Error("control socket left behind")
	}
	if err := exec.Command(bin, "ctl", "--socket", socket, "stats").Run(); err == nil || err.(*exec.ExitError).ExitCode() != 3 {
		t.Errorf("ctl with no switch: %v, want exit code 3", err)
	}
	conn.Close()
	if n := <-written; n == 0 {
		t.Error("the transfer never started")
	}
}

// buildSoftnet builds the softnet command into a directory anyone may
// read, and returns its path.
func buildSoftnet(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// The test's temporary directories are private to root; the
	// without-root case runs the command as nobody.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "softnet")
	if out, err := exec.Command("go", "build", "-o", bin, "softnet.dev/cmd/softnet").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
