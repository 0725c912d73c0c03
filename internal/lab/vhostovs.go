package lab

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"softnet.dev/internal/dpdk"
)

// Open vSwitch with DPDK as a --vhost back-end (VhostOVS): the switch that
// operators run for VMs instead of softnet. Each configuration starts an
// ovsdb-server and an ovs-vswitchd of its own (package dpdk: a run
// directory of their own, never the system's Open vSwitch), with a netdev
// bridge of two dpdkvhostuser ports, whose sockets the front-end connects
// to as it connects to the other back-ends', and the bridge's default
// flow, the NORMAL action: a learning switch, like softnet's bridge. One
// PMD thread polls both ports, on the CPU the other back-ends forward on
// (pmd-cpu-mask). Its DPDK runs in its default memory mode, in memory
// taken from hugepages added for it (dpdk.ReserveInMemoryHugepages).

const (
	// ovsMemMiB is its DPDK's memory, preallocated and its limit: two
	// per-port mempools of about 20,000 mbufs (about 65 MiB each) and the
	// rings. Without per-port-memory Open vSwitch sizes one mempool for
	// every port at 262,144 mbufs (about 750 MiB), halving the count
	// until it fits, and a vhost-user port that connects meanwhile fails
	// to get memory for its rings.
	ovsMemMiB = 256
	ovsBridge = "br-lab"
)

// ovsPorts are the bridge's two ports; dpdkvhostuser ports' sockets are
// named after them in the run directory.
var ovsPorts = [2]string{"vhu0", "vhu1"}

// ovsVhost is Open vSwitch's back-end.
type ovsVhost struct {
	ovs *dpdk.OVS
	pmd int // the PMD thread
}

func openOVSVhost(ctx context.Context, huge *dpdk.Hugepages, dir string) (*ovsVhost, error) {
	if huge == nil {
		return nil, errors.New("open vswitch: no hugepages reserved for it")
	}
	ovs, err := dpdk.StartOVS(ctx, dpdk.OVSConfig{Parent: dir, Huge: huge, MemMiB: ovsMemMiB, Timeout: vhostStart,
		OtherConfig: map[string]string{
			"pmd-cpu-mask":    fmt.Sprintf("%#x", 1<<vhostBackendCPU),
			"per-port-memory": "true",
		}})
	if err != nil {
		return nil, err
	}
	args := []string{"--", "add-br", ovsBridge, "--", "set", "Bridge", ovsBridge, "datapath_type=netdev"}
	for _, p := range ovsPorts {
		args = append(args, "--", "add-port", ovsBridge, p, "--", "set", "Interface", p, "type=dpdkvhostuser")
	}
	_, err = ovs.Vsctl(ctx, args...)
	if err == nil {
		err = checkNormal(ctx, ovs)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open vswitch: %w\n%s", err, ovs.Log()), ovs.Stop(vhostStop))
	}
	return &ovsVhost{ovs: ovs}, nil
}

// checkNormal checks that the bridge's one OpenFlow flow is the NORMAL
// action, as a bridge without a controller starts: the learning switch
// measured. bridge/dump-flows also lists the hidden flows: in-band
// control (none without a controller) and table 254's, the datapath's
// own (recirculation, drops, upcalls), which are not the bridge's.
func checkNormal(ctx context.Context, ovs *dpdk.OVS) error {
	out, err := ovs.Appctl(ctx, "bridge/dump-flows", ovsBridge)
	if err != nil {
		return err
	}
	var flows []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.TrimSpace(line)
		if f != "" && !strings.HasPrefix(f, "table_id=254,") {
			flows = append(flows, f)
		}
	}
	if len(flows) != 1 || strings.Contains(flows[0], "table_id=") || !strings.HasSuffix(flows[0], "priority=0,actions=NORMAL") {
		return fmt.Errorf("bridge %s: flows %q, want the one flow priority=0,actions=NORMAL", ovsBridge, flows)
	}
	return nil
}

func (v *ovsVhost) sockets() [2]string {
	return [2]string{filepath.Join(v.ovs.Dir, ovsPorts[0]), filepath.Join(v.ovs.Dir, ovsPorts[1])}
}

// ready waits until both ports are up and the PMD polls both their
// receive queues: frames that the front-end sends before then are
// dropped, and the loop would start with fewer.
func (v *ovsVhost) ready(ctx context.Context, fe *dpdk.Process) error {
	deadline := time.Now().Add(vhostStart)
	for {
		up, err := v.portsUp(ctx)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if up {
			break
		}
		var why string
		switch {
		case v.ovs.Exited():
			why = "exited"
		case fe.Exited():
			why = "the front-end exited"
		case time.Now().After(deadline):
			why = fmt.Sprintf("ports not up and polled after %v", vhostStart)
		}
		if why != "" {
			return fmt.Errorf("open vswitch: %s (%v):\n%s\nfront-end:\n%s", why, err, v.ovs.Log(), fe.Output())
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	tid, err := threadNamed(v.ovs.Pid(), "pmd")
	if err != nil {
		return fmt.Errorf("open vswitch's PMD thread: %w", err)
	}
	v.pmd = tid
	return nil
}

// portsUp reports whether both ports' links are up and the PMD has both
// their receive queues enabled.
func (v *ovsVhost) portsUp(ctx context.Context) (bool, error) {
	var args []string
	for _, p := range ovsPorts {
		args = append(args, "--", "get", "Interface", p, "link_state")
	}
	out, err := v.ovs.Vsctl(ctx, args...)
	if err != nil {
		return false, err
	}
	if f := strings.Fields(out); len(f) != 2 || f[0] != "up" || f[1] != "up" {
		return false, fmt.Errorf("link states %q", f)
	}
	rxq, err := v.ovs.Appctl(ctx, "dpif-netdev/pmd-rxq-show")
	if err != nil {
		return false, err
	}
	if n := strings.Count(rxq, "(enabled)"); n != len(ovsPorts) {
		return false, fmt.Errorf("%d receive queues enabled:\n%s", n, rxq)
	}
	return true, nil
}

func (v *ovsVhost) cpu() (time.Duration, error) { return otherProcessCPU(v.ovs.Pid()) }

func (v *ovsVhost) thread() (time.Duration, error) { return taskCPU(v.ovs.Pid(), v.pmd) }

func (v *ovsVhost) forwarder() taskRef {
	return taskRef{role: "back-end", pid: v.ovs.Pid(), tid: v.pmd}
}

// window reads the PMD's statistics at both ends.
func (v *ovsVhost) window(ctx context.Context) (func(*VhostRun) error, error) {
	s0, err := v.pmdStats(ctx)
	if err != nil {
		return nil, err
	}
	return func(r *VhostRun) error {
		s1, err := v.pmdStats(ctx)
		if err != nil {
			return err
		}
		r.PMD = ptr(s1.Sub(s0))
		return nil
	}, nil
}

// pmdStats are the one PMD's counters.
func (v *ovsVhost) pmdStats(ctx context.Context) (dpdk.PMDStats, error) {
	s, err := v.ovs.PMDStats(ctx)
	if err != nil {
		return dpdk.PMDStats{}, fmt.Errorf("open vswitch: %w", err)
	}
	if len(s) != 1 || s[0].Core != vhostBackendCPU {
		return dpdk.PMDStats{}, fmt.Errorf("open vswitch: PMD threads %+v, want one on CPU %d", s, vhostBackendCPU)
	}
	return s[0], nil
}

func (v *ovsVhost) finish(*VhostRun) error { return v.ovs.Stop(vhostStop) }
