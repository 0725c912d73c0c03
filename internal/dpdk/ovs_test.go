//go:build linux

package dpdk

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"softnet.dev/internal/netnstest"
)

// testdata/pmd-stats-show.txt is what Open vSwitch 3.1 printed for
// `ovs-appctl dpif-netdev/pmd-stats-show` with one PMD thread after a few
// seconds of testpmd's loop through a bridge of two vhost-user ports.
func TestParsePMDStats(t *testing.T) {
	b, err := os.ReadFile("testdata/pmd-stats-show.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := ParsePMDStats(string(b))
	want := PMDStats{Core: 0, Packets: 6089824, EMCHits: 6089344, MegaflowHits: 478, Upcalls: 2,
		IdleCycles: 19261632222, ProcessingCycles: 5391270675}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("ParsePMDStats = %+v, want [%+v] (the main thread's block left out)", got, want)
	}
	if d := got[0].Sub(PMDStats{Packets: 89824, IdleCycles: 1}); d.Packets != 6e6 || d.IdleCycles != 19261632221 || d.EMCHits != want.EMCHits {
		t.Errorf("Sub = %+v", d)
	}
	if s := ParsePMDStats("ovs-appctl: cannot connect\n"); len(s) != 0 {
		t.Errorf("ParsePMDStats of an error = %+v", s)
	}
}

// Without an ovs-vswitchd built with DPDK the error names the package:
// the plain ovs-vswitchd is refused.
func TestFindOVSNamesThePackage(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "ovs-vswitchd")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\necho 'ovs-vswitchd (Open vSwitch) 3.1.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	saved := ovsVswitchdCandidates
	t.Cleanup(func() { ovsVswitchdCandidates = saved })
	for _, candidates := range [][]string{{filepath.Join(dir, "none")}, {plain}} {
		ovsVswitchdCandidates = candidates
		_, err := FindOVS()
		if err == nil || !strings.Contains(err.Error(), "Debian package "+OVSPackage) {
			t.Errorf("FindOVS with %v: %v", candidates, err)
		}
		if _, err := StartOVS(context.Background(), OVSConfig{}); err == nil || !strings.Contains(err.Error(), OVSPackage) {
			t.Errorf("StartOVS with %v: %v", candidates, err)
		}
	}
}

// requireOVS skips the test without Open vSwitch with DPDK (or fails it
// where root tests are required).
func requireOVS(t *testing.T) OVSTools {
	t.Helper()
	netnstest.RequireRoot(t)
	tools, err := FindOVS()
	if err != nil {
		if os.Getenv(netnstest.RequireEnv) == "1" {
			t.Fatalf("%v, and %s=1", err, netnstest.RequireEnv)
		}
		t.Skip(err)
	}
	return tools
}

// An Open vSwitch of the test's own starts with DPDK, takes a netdev
// bridge with a vhost-user port whose socket is in its run directory,
// keeps its bridge's TAP device in a network namespace of its own, and
// leaves nothing when it stops: no process, run directory or DPDK
// runtime directory.
func TestOVSStartStop(t *testing.T) {
	requireOVS(t)
	huge, err := ReserveInMemoryHugepages(128)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := huge.Release(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	o, err := StartOVS(ctx, OVSConfig{Parent: t.TempDir(), Huge: huge, MemMiB: 128,
		OtherConfig: map[string]string{"pmd-cpu-mask": "0x1", "per-port-memory": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = o.Stop(20 * time.Second)
		}
	})
	const bridge = "br-ovstest"
	if _, err := o.Vsctl(ctx, "add-br", bridge, "--", "set", "Bridge", bridge, "datapath_type=netdev",
		"--", "add-port", bridge, "vhu0", "--", "set", "Interface", "vhu0", "type=dpdkvhostuser"); err != nil {
		t.Fatalf("%v\n%s", err, o.Log())
	}
	if fi, err := os.Stat(filepath.Join(o.Dir, "vhu0")); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("vhost-user socket in the run directory: %v, %v", fi, err)
	}
	if s, err := o.PMDStats(ctx); err != nil || len(s) != 1 || s[0].Core != 0 {
		t.Errorf("PMD threads %+v, %v; want one on CPU 0", s, err)
	}
	own, _ := os.Readlink("/proc/self/ns/net")
	theirs, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(o.Pid()), "ns/net"))
	if err != nil || theirs == own {
		t.Errorf("ovs-vswitchd's network namespace %q (%v), the test's %q", theirs, err, own)
	}
	if _, err := os.Stat("/sys/class/net/" + bridge); err == nil {
		t.Errorf("the bridge's device %s is in the test's namespace", bridge)
	}
	pids := []int{o.db.Pid(), o.vswitchd.Pid()}
	stopped = true
	if err := o.Stop(20 * time.Second); err != nil {
		t.Error(err)
	}
	for _, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("process %d still there", pid)
		}
	}
	for _, p := range []string{o.Dir, filepath.Join(ealRuntimeDir, o.prefix)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
}
