package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softnet.dev/afxdp"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/vswitch"
)

// afxdp ports are added and removed live through the API, like TAP
// ports, on the host ends of veth pairs the test makes: three pods
// bridged, a second claim on one interface refused, a port removed
// (its XDP program with it), and a veth deleted under a live port,
// which goes down while the others keep forwarding.
func TestAPIAFXDPPort(t *testing.T) {
	netnstest.RequireTools(t, "ping", "ip")
	hosts := netnstest.New(t) // the veths' host ends
	var pods [3]*netnstest.NS
	for i := range pods {
		pods[i] = netnstest.New(t)
		mustExec(t, hosts, "ip", "link", "add", fmt.Sprintf("ax%d", i), "type", "veth", "peer", "name", "eth0", "netns", pods[i].Name)
		mustExec(t, hosts, "ip", "link", "set", fmt.Sprintf("ax%d", i), "up")
		// AF_XDP frames carry no checksum metadata: the switch finishes
		// partial checksums itself, so the pods keep their offloads.
		pods[i].AddAddr(t, "eth0", netip4(i))
		mustExec(t, pods[i], "ip", "link", "set", "eth0", "up")
	}

	sw, err := vswitch.Open(vswitch.Config{}, vswitch.Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	ls := &liveSwitch{sw: sw, socket: filepath.Join(t.TempDir(), "softnet.sock")}
	ln, err := Listen(ls.socket, -1)
	if err != nil {
		t.Fatal(err)
	}
	ls.srv, ls.served = NewServer(sw, slog.New(slog.NewTextHandler(io.Discard, nil))), make(chan error, 1)
	go func() { ls.served <- ls.srv.Serve(ln) }()
	t.Cleanup(func() { ls.stop(t, nil) })
	ls.client = NewClient(ls.socket)
	ctx := context.Background()

	for i := range pods {
		var added Port
		spec := fmt.Sprintf("afxdp:ax%d,netns=%s", i, hosts.Name)
		if err := ls.client.Post(ctx, "/v1/ports", map[string]string{"spec": spec}, &added); err != nil {
			t.Fatal(err)
		}
		if added.Name != fmt.Sprintf("ax%d", i) || added.Created || added.Down || added.Spec != spec || !strings.Contains(added.Info, "L2") {
			t.Errorf("added port %+v", added)
		}
	}
	if out, err := hosts.Exec("ip", "link", "show", "ax0"); err != nil || !strings.Contains(out, "prog/xdp") {
		t.Errorf("no XDP program on ax0 (%v):\n%s", err, out)
	}
	// Another port on the same interface is refused, whatever its kind,
	// and whichever way it names the namespace.
	for _, spec := range []string{
		"afxdp:other,netns=" + hosts.Name + ",dev=ax0",
		"tap:other,netns=/run/netns/" + hosts.Name + ",dev=ax0",
	} {
		var refused *RefusedError
		if err := ls.client.Post(ctx, "/v1/ports", map[string]string{"spec": spec}, nil); !errors.As(err, &refused) || refused.Status != 400 || !strings.Contains(refused.Error(), "has interface ax0") {
			t.Errorf("port add %s: %v", spec, err)
		}
	}
	ping := func(from int, to int) error {
		_, err := pods[from].Exec("ping", "-c", "2", "-i", "0.2", "-W", "2", netip4(to).Addr().String())
		return err
	}
	for _, c := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		if err := ping(c[0], c[1]); err != nil {
			t.Errorf("ping from pod %d to pod %d: %v", c[0], c[1], err)
		}
	}
	// The API's JSON, as docs/api.md has it: the port's own counters
	// under afxdp; and the metrics.
	var rep struct {
		Devices []struct {
			Port  string       `json:"port"`
			AFXDP *afxdp.Stats `json:"afxdp"`
		} `json:"devices"`
	}
	if err := ls.client.Get(ctx, "/v1/stats", &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Devices) != 3 || rep.Devices[0].AFXDP == nil || rep.Devices[0].AFXDP.RxPackets == 0 || rep.Devices[0].AFXDP.Lent == 0 {
		t.Errorf("stats' devices %+v", rep.Devices)
	}
	rec := httptest.NewRecorder()
	MetricsHandler(sw).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `softnet_afxdp_syscalls_total{dir="tx",port="ax0"}`) && !strings.Contains(rec.Body.String(), `softnet_afxdp_syscalls_total{port="ax0",dir="tx"}`) {
		t.Errorf("metrics without the afxdp port's system calls")
	}

	// Removed: its program goes, and the interface is the kernel's again.
	if err := ls.client.Delete(ctx, "/v1/ports/ax0"); err != nil {
		t.Fatal(err)
	}
	if out, err := hosts.Exec("ip", "link", "show", "ax0"); err != nil || strings.Contains(out, "prog/xdp") {
		t.Errorf("ax0 after its port was removed (%v):\n%s", err, out)
	}
	// A port added again on it takes it.
	if err := ls.client.Post(ctx, "/v1/ports", map[string]string{"spec": "afxdp:ax0,netns=" + hosts.Name}, nil); err != nil {
		t.Fatal(err)
	}
	if err := ping(0, 1); err != nil {
		t.Errorf("ping from pod 0 to pod 1 through the port added again: %v", err)
	}

	// The veth deleted under a live port: the port is down, and says
	// why; the others forward.
	mustExec(t, hosts, "ip", "link", "del", "ax2")
	for deadline := time.Now().Add(10 * time.Second); ; {
		var ports []Port
		if err := ls.client.Get(ctx, "/v1/ports", &ports); err != nil {
			t.Fatal(err)
		}
		i := len(ports) - 1
		for i >= 0 && ports[i].Name != "ax2" {
			i--
		}
		if i >= 0 && ports[i].Down && strings.Contains(ports[i].Error, "interface deleted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ax2 not down after its veth was deleted: %+v", ports)
		}
		// The worker learns it from the port's next transmit: the pods'
		// broadcasts and pings give it some.
		_ = ping(0, 2)
	}
	if err := ping(1, 0); err != nil {
		t.Errorf("ping from pod 1 to pod 0 with ax2 down: %v", err)
	}
	if err := ls.client.Delete(ctx, "/v1/ports/ax2"); err != nil {
		t.Errorf("removing the port whose veth is gone: %v", err)
	}
}

// netip4 is pod i's address.
func netip4(i int) netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("198.18.31.%d/24", i+1))
}
