package vswitch

import (
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softnet.dev/internal/netnstest"
)

// A switch restarted keeping its guests: the TAP guest's device stays,
// with its address, and the next switch adopts it; the port in client
// mode connects again to DPDK testpmd's virtio-user in server mode,
// which takes the new back-end without being restarted, and the guest's
// pings reach testpmd again without anyone configuring anything. The
// new switch's close removes the device it adopted.
func TestVhostUserRestartKeepsGuests(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	g := newGuests(t, 1)[0]
	sock := filepath.Join(t.TempDir(), "vr1.sock")
	cfg := Config{Ports: []PortSpec{mustPort(t, "tap:"+g.dev+",netns="+g.ns.Name), mustPort(t, "vhost-user:vr1,socket="+sock+",mode=client")}}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("switches' log:\n%s", logs.String())
		}
	})
	sw, err := Open(cfg, Tuning{Persist: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix("198.18.28.1/24"))
	pmd := startTestpmdWith(t, "icmpecho", 1, ",server=1", nil, sock)
	waitPing(t, g, "198.18.28.2", pmd, vhostPort(t, sw, "vr1"))
	pingTen(t, g, "198.18.28.2")

	kept, err := sw.KeepGuests()
	if err != nil {
		t.Fatal(err)
	}
	if !kept.Ports[0].Kept || kept.Ports[1].Kept {
		t.Errorf("kept %+v: want the TAP port's device only", kept.Ports)
	}
	stop()
	if out, _ := g.ns.Exec("ip", "addr", "show", "dev", g.dev); !strings.Contains(out, "198.18.28.1/24") {
		t.Fatalf("the kept device or its address is gone:\n%s", out)
	}
	start := time.Now()
	sw, err = Open(kept, Tuning{Persist: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	stop = runSwitch(t, sw, func() {
		if out, err := g.ns.Exec("ip", "link", "show", g.dev); err == nil {
			t.Errorf("the adopted device outlived its switch:\n%s", out)
		}
	})
	waitPing(t, g, "198.18.28.2", pmd, vhostPort(t, sw, "vr1"))
	t.Logf("from the new switch's open to testpmd's first echo: %v (machine loaded)", time.Since(start).Round(time.Millisecond))
	pingTen(t, g, "198.18.28.2")
	if !strings.Contains(logs.String(), "adopted=true") {
		t.Error("the new switch did not adopt the TAP device")
	}
	stop()
}
