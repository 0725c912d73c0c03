package tun

import (
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/port"
)

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Name: "a-name-longer-than-15"},
		{Name: "bad/name"},
		{Name: "tun%d"},
		{Name: "ok", Queues: -1},
		{Name: "ok", Queues: MaxQueues + 1},
		{Name: "ok", MTU: 20},
		{Name: "ok", NetNS: "../etc"},
	} {
		if d, err := Open(cfg); err == nil {
			d.Close()
			t.Errorf("Open(%+v) succeeded", cfg)
		} else if !strings.HasPrefix(err.Error(), "tun "+cfg.Name+": ") && !(cfg.Name == "" && strings.HasPrefix(err.Error(), "tun: ")) {
			// A device without a name is "tun: ...", not "tun : ...".
			t.Errorf("Open(%+v): error %q lacks context", cfg, err)
		}
	}
}

// Device names as the kernel's dev_valid_name takes them: it refuses
// '/', ':' and white space byte by byte (with 0xa0, which is in "à"), and
// takes the rest, commas and control characters included.
func TestConfigNames(t *testing.T) {
	for _, name := range []string{".", "..", "a/b", "a:b", "a b", "a\tb", "a\vb", "a\rb", "a\xa0b", "xày", "a\x00b"} {
		if err := (Config{Name: name}).Validate(); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
	for _, name := range []string{"eth0", "a,b", "a=b", "a\x01b", "é"} {
		if err := (Config{Name: name}).Validate(); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

func TestOpenClose(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		layer packet.Layer
		max   int
		show  []string // in `ip -d link show`
	}{
		{"tun-offload", Config{Offload: true}, packet.L3, 65535, []string{"tun type tun", "vnet_hdr on", "persist off"}},
		{"tun-plain", Config{MTU: 1400}, packet.L3, 1400, []string{"mtu 1400", "vnet_hdr off"}},
		{"tap-offload", Config{TAP: true, Offload: true}, packet.L2, 65535 + linkOverhead(true), []string{"tun type tap", "vnet_hdr on"}},
		{"tap-plain", Config{TAP: true, MTU: 9000}, packet.L2, 9000 + linkOverhead(true), []string{"tun type tap", "mtu 9000"}},
		{"multiqueue", Config{Queues: 2, Offload: true}, packet.L3, 65535, []string{"multi_queue numqueues 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := netnstest.New(t)
			cfg := tc.cfg
			cfg.Name, cfg.NetNS = devName("sn"), ns.Name
			d, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					d.Close()
				}
			})
			if !d.Created() {
				t.Error("Created() = false for a new device")
			}
			info := d.Info()
			t.Logf("%v", info)
			queues := max(cfg.Queues, 1)
			if info.Name != cfg.Name || info.Layer != tc.layer || info.Queues != queues || info.MaxFrame != tc.max {
				t.Errorf("Info() = %+v, want layer %v, %d queues, max frame %d", info, tc.layer, queues, tc.max)
			}
			const base = port.OffloadCsum | port.OffloadTSO4 | port.OffloadTSO6 | port.OffloadTSOECN
			if cfg.Offload && info.Offloads&base != base {
				t.Errorf("offloads %v, want at least %v", info.Offloads, base)
			}
			if !cfg.Offload && info.Offloads != 0 {
				t.Errorf("offloads %v without Offload", info.Offloads)
			}
			out, ok := linkShow(t, ns, cfg.Name)
			if !ok {
				t.Fatalf("device %s not in namespace %s", cfg.Name, ns.Name)
			}
			for _, s := range append(tc.show, "state UNKNOWN", ",UP") {
				if !strings.Contains(out, s) {
					t.Errorf("ip link lacks %q:\n%s", s, out)
				}
			}
			fds := map[int]bool{}
			for i := range queues {
				rq, tq := d.RxQueue(i), d.TxQueue(i)
				if rq == nil || tq == nil {
					t.Fatalf("queue %d missing", i)
				}
				// On the io_uring path a queue's FD is its ring's eventfd,
				// which it has once a worker attaches it (or its first
				// Receive); the system-call path's is the queue's file.
				if io, _ := d.IO(); io == IOUring {
					if rq.FD() != -1 {
						t.Errorf("queue %d: fd %d before it is on a ring", i, rq.FD())
					}
				} else if rq.FD() < 0 || fds[rq.FD()] {
					t.Errorf("queue %d: fd %d not its own", i, rq.FD())
				}
				fds[rq.FD()] = true
				if rq.Arm() {
					t.Errorf("queue %d: Arm reports pending packets", i)
				}
				rq.Disarm()
			}
			if d.RxQueue(queues) != nil || d.TxQueue(queues) != nil || d.RxQueue(-1) != nil {
				t.Error("queue beyond Queues is not nil")
			}
			if d2, err := Open(cfg); queues == 1 && err == nil {
				d2.Close()
				t.Error("a second Open of a single-queue device in use succeeded")
			} else if queues > 1 {
				// Multi-queue: a second Open attaches more queues to it.
				if err != nil {
					t.Errorf("attaching more queues: %v", err)
				} else {
					if d2.Created() {
						t.Error("second Open reports it created the device")
					}
					if err := d2.Close(); err != nil {
						t.Error(err)
					}
				}
			}

			closed = true
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if out, ok := linkShow(t, ns, cfg.Name); ok {
				t.Errorf("device still exists after Close:\n%s", out)
			}
			if err := d.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// A persistent device made by someone else is attached to and left as it
// was found: still there, still down, its MTU back.
func TestAttachExisting(t *testing.T) {
	ns := netnstest.New(t)
	name := devName("snp")
	exec(t, ns, "ip", "tuntap", "add", "mode", "tun", "name", name)
	before, _ := linkShow(t, ns, name)
	if strings.Contains(before, ",UP") {
		t.Fatalf("new persistent device is up:\n%s", before)
	}
	d, err := Open(Config{Name: name, NetNS: ns.Name, Offload: true, MTU: 1280})
	if err != nil {
		t.Fatal(err)
	}
	if d.Created() {
		t.Error("Created() = true for an existing device")
	}
	during, _ := linkShow(t, ns, name)
	if !strings.Contains(during, ",UP") || !strings.Contains(during, "mtu 1280") {
		t.Errorf("device not up with MTU 1280 while open:\n%s", during)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	after, ok := linkShow(t, ns, name)
	if !ok {
		t.Fatal("existing device removed by Close")
	}
	for _, s := range []string{"persist on", "mtu 1500", "state DOWN"} {
		if !strings.Contains(after, s) {
			t.Errorf("after Close, ip link lacks %q:\n%s", s, after)
		}
	}

	// A device that is not TUN/TAP is refused without being touched.
	exec(t, ns, "ip", "link", "add", "snveth0", "type", "veth", "peer", "name", "snveth1")
	if d, err := Open(Config{Name: "snveth0", NetNS: ns.Name}); err == nil {
		d.Close()
		t.Error("Open attached to a veth device")
	} else {
		t.Logf("veth: %v", err)
	}
	if _, ok := linkShow(t, ns, "snveth0"); !ok {
		t.Error("failed Open removed an existing device")
	}
	// The wrong mode fails, and leaves the device as it was.
	if d, err := Open(Config{Name: name, NetNS: ns.Name, TAP: true}); err == nil {
		d.Close()
		t.Error("Open as TAP of a TUN device succeeded")
	} else {
		t.Logf("TAP on a TUN device: %v", err)
	}
	if out, ok := linkShow(t, ns, name); !ok || !strings.Contains(out, "state DOWN") {
		t.Errorf("failed Open changed the device:\n%s", out)
	}
}

func TestOpenMissingNamespace(t *testing.T) {
	netnstest.RequireRoot(t)
	_, err := Open(Config{Name: "snx", NetNS: "softnet-no-such-ns"})
	if err == nil || !strings.Contains(err.Error(), "softnet-no-such-ns") {
		t.Errorf("Open in a missing namespace: %v", err)
	}
}

// A namespace can be given by path, as container runtimes hand them over:
// /run/netns/NAME, or /proc/PID/ns/net of a process inside it.
func TestOpenNamespaceByPath(t *testing.T) {
	ns := netnstest.New(t)
	sleeper := osexec.Command("ip", "netns", "exec", ns.Name, "sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	named := "/run/netns/" + ns.Name
	procPath := fmt.Sprintf("/proc/%d/ns/net", sleeper.Process.Pid)
	// ip netns exec enters the namespace, then execs sleep.
	deadline := time.Now().Add(10 * time.Second)
	for !sameFile(named, procPath) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never entered %s", procPath, named)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, p := range []string{named, procPath} {
		name := devName(fmt.Sprintf("snp%d", i))
		d := openDev(t, Config{Name: name, NetNS: p})
		if _, ok := linkShow(t, ns, name); !ok {
			t.Errorf("netns=%s: device %s not in namespace %s", p, name, ns.Name)
		}
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []string{"/run/netns/../x", "/", "relative/path", named + "/"} {
		if err := (Config{Name: "x", NetNS: bad}).Validate(); err == nil {
			t.Errorf("netns %q accepted", bad)
		}
	}
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// Devices of one name in two namespaces are two ports named apart
// (PortName): each reports its port's name, has its kernel counters
// read and is removed on close by its own device name.
func TestPortNameApartFromDevice(t *testing.T) {
	var devs []*Device
	var nss []*netnstest.NS
	for i := range 2 {
		ns := netnstest.New(t)
		port := devName("pn")
		d, err := Open(Config{Name: "eth0", PortName: port, NetNS: "/run/netns/" + ns.Name, IO: testIO})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Info().Name; got != port {
			t.Errorf("device %d: Info().Name = %s, want %s", i, got, port)
		}
		if _, err := d.KernelStats(); err != nil {
			t.Errorf("device %d: %v", i, err)
		}
		devs, nss = append(devs, d), append(nss, ns)
	}
	for i, d := range devs {
		if _, ok := linkShow(t, nss[i], "eth0"); !ok {
			t.Fatalf("no eth0 in %s", nss[i].Name)
		}
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		if _, ok := linkShow(t, nss[i], "eth0"); ok {
			t.Errorf("eth0 still in %s after Close", nss[i].Name)
		}
	}
}

// A kept device outlives Close with its address and stays up; the next
// Open adopts it, with its address, as its own: Close then removes it.
// Adopting a device that is not there fails with ErrNoDevice and
// creates nothing.
func TestKeepAdopt(t *testing.T) {
	ns := netnstest.New(t)
	name := devName("snk")
	for _, q := range []int{1, 2} {
		d, err := Open(Config{Name: name, NetNS: ns.Name, Offload: true, Queues: q})
		if err != nil {
			t.Fatal(err)
		}
		exec(t, ns, "ip", "addr", "add", "198.18.77.1/24", "dev", name)
		if err := d.Keep(); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := d.Keep(); err == nil {
			t.Error("a closed device was kept")
		}
		kept, ok := linkShow(t, ns, name)
		if !ok || !strings.Contains(kept, ",UP") {
			t.Fatalf("%d queues: kept device gone or down:\n%s", q, kept)
		}
		a, err := Open(Config{Name: name, NetNS: ns.Name, Offload: true, Queues: q, Adopt: true})
		if err != nil {
			t.Fatal(err)
		}
		if !a.Created() {
			t.Error("an adopted device is not the program's")
		}
		if out, _ := ns.Exec("ip", "addr", "show", "dev", name); !strings.Contains(out, "198.18.77.1/24") {
			t.Errorf("%d queues: the adopted device lost its address:\n%s", q, out)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if out, ok := linkShow(t, ns, name); ok {
			t.Fatalf("%d queues: the adopted device outlived Close:\n%s", q, out)
		}
	}
	// A device still held by the program before (its files not yet
	// released) is adopted once that one lets it go.
	held, err := Open(Config{Name: name, NetNS: ns.Name})
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Keep(); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { time.Sleep(200 * time.Millisecond); released <- held.Close() }()
	a, err := Open(Config{Name: name, NetNS: ns.Name, Adopt: true})
	if err != nil {
		t.Fatalf("adopting a device held for 200 ms: %v", err)
	}
	if err := errors.Join(<-released, a.Close()); err != nil {
		t.Fatal(err)
	}
	// A persistent device outlives its program's death, not its Close.
	d, err := Open(Config{Name: name, NetNS: ns.Name})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Persist(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if out, ok := linkShow(t, ns, name); ok {
		t.Fatalf("a persistent device outlived Close:\n%s", out)
	}
	if d, err := Open(Config{Name: name, NetNS: ns.Name, Adopt: true}); !errors.Is(err, ErrNoDevice) {
		if err == nil {
			d.Close()
		}
		t.Errorf("adopting no device: %v", err)
	}
	if out, ok := linkShow(t, ns, name); ok {
		t.Errorf("a failed adopt created a device:\n%s", out)
	}
}
