//go:build linux

package dpdk

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Open vSwitch with DPDK, run by this package for the lab: an
// ovsdb-server and an ovs-vswitchd of their own, never the system's. Both
// keep their database, control sockets, pidfiles and logs in a run
// directory of their own (OVS_RUNDIR, OVS_DBDIR, OVS_LOGDIR and
// OVS_SYSCONFDIR point there, and every path is also given as a flag), so
// that nothing is read from or written to /etc/openvswitch,
// /var/run/openvswitch or /var/log/openvswitch, and no service manager is
// involved. ovs-vswitchd runs in a network namespace of its own, which
// dies with it: a netdev bridge's own port is a TAP device, and it
// appears there and not in the caller's namespace; --disable-system keeps
// it from the kernel's datapath. DPDK runs under a --file-prefix of its
// own on hugepages added for it (ReserveInMemoryHugepages).

// OVSPackage is the Debian package of ovs-vswitchd built with DPDK; it
// depends on those of ovsdb-server, ovsdb-tool, ovs-vsctl and ovs-appctl.
const OVSPackage = "openvswitch-switch-dpdk"

// ovsVswitchdCandidates are where an ovs-vswitchd with DPDK may be: Debian
// installs it beside the plain one, to which /usr/sbin/ovs-vswitchd points
// unless update-alternatives chose the other.
var ovsVswitchdCandidates = []string{"/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk", "ovs-vswitchd"}

// ovsSchemas are where the Open_vSwitch database's schema may be.
var ovsSchemas = []string{"/usr/share/openvswitch/vswitch.ovsschema"}

// OVSTools are the programs and the schema an Open vSwitch with DPDK
// needs, and its version.
type OVSTools struct {
	Vswitchd, DBServer, DBTool, Vsctl, Appctl string
	Schema                                    string
	// Version is what ovs-vswitchd --version printed, on one line
	// ("ovs-vswitchd-dpdk (Open vSwitch) 3.1.0, DPDK 22.11.11").
	Version string
}

// FindOVS returns the tools, or an error that names the package.
func FindOVS() (OVSTools, error) {
	var t OVSTools
	var tried []string
	for _, c := range ovsVswitchdCandidates {
		path, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, path, "--version").Output()
		cancel()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		if !strings.Contains(string(out), "DPDK") {
			tried = append(tried, path+" is built without DPDK")
			continue
		}
		t.Vswitchd = path
		t.Version = strings.Join(strings.Fields(strings.ReplaceAll(string(out), "\n", ", ")), " ")
		t.Version = strings.TrimSuffix(t.Version, ",")
		break
	}
	missing := func(what string) (OVSTools, error) {
		msg := fmt.Sprintf("%s not found: install Open vSwitch with DPDK (Debian package %s)", what, OVSPackage)
		if len(tried) > 0 {
			msg += " (" + strings.Join(tried, "; ") + ")"
		}
		return OVSTools{}, errors.New(msg)
	}
	if t.Vswitchd == "" {
		return missing("ovs-vswitchd with DPDK")
	}
	for _, p := range []struct {
		dst  *string
		name string
	}{{&t.DBServer, "ovsdb-server"}, {&t.DBTool, "ovsdb-tool"}, {&t.Vsctl, "ovs-vsctl"}, {&t.Appctl, "ovs-appctl"}} {
		path, err := exec.LookPath(p.name)
		if err != nil {
			return missing(p.name)
		}
		*p.dst = path
	}
	for _, s := range ovsSchemas {
		if _, err := os.Stat(s); err == nil {
			t.Schema = s
			break
		}
	}
	if t.Schema == "" {
		return missing("the Open_vSwitch schema " + strings.Join(ovsSchemas, " or "))
	}
	return t, nil
}

// OVSConfig is how an Open vSwitch runs.
type OVSConfig struct {
	// Parent is where the run directory is made (default os.TempDir()).
	// The vhost-user sockets of dpdkvhostuser ports are made in the run
	// directory, and a socket's path has at most 107 bytes: keep it short.
	Parent string
	// Huge is DPDK's hugetlbfs, from ReserveInMemoryHugepages; MemMiB its
	// memory, preallocated and its limit (dpdk-socket-mem and
	// dpdk-socket-limit).
	Huge   *Hugepages
	MemMiB int
	// OtherConfig are more of the Open_vSwitch table's other_config keys
	// (pmd-cpu-mask, per-port-memory).
	OtherConfig map[string]string
	// Timeout bounds each step of starting and each command (default 60s).
	Timeout time.Duration
	// NoDPDK runs the same ovs-vswitchd without initialising DPDK (no
	// Huge, no MemMiB): a netdev bridge's ports are then the userspace
	// datapath's own, as the afxdp netdev type (`type=afxdp`), which
	// needs no hugepages.
	NoDPDK bool
}

// OVS is a running ovsdb-server and ovs-vswitchd with DPDK initialised.
type OVS struct {
	Dir   string // the run directory
	Tools OVSTools

	timeout      time.Duration
	env          []string
	prefix, huge string
	db, vswitchd *child
	once         sync.Once
	stopErr      error
}

// Files in the run directory.
const (
	ovsDB          = "conf.db"
	ovsDBSocket    = "db.sock"
	ovsVswitchdCtl = "ovs-vswitchd.ctl"
	ovsVswitchdLog = "ovs-vswitchd.log"
)

// StartOVS creates a run directory with a database made from the schema,
// starts ovsdb-server on it, configures DPDK (dpdk-init=true, dpdk-extra
// with the file prefix, the hugetlbfs and no PCI bus, the memory) and
// cfg.OtherConfig, and starts ovs-vswitchd, returning once DPDK is
// initialised. On error it has removed everything again.
func StartOVS(ctx context.Context, cfg OVSConfig) (o *OVS, err error) {
	tools, err := FindOVS()
	if err != nil {
		return nil, err
	}
	if !cfg.NoDPDK && (cfg.Huge == nil || cfg.Huge.Dir == "") {
		return nil, errors.New("open vswitch: no hugetlbfs mount")
	}
	if !cfg.NoDPDK && cfg.MemMiB <= 0 {
		return nil, fmt.Errorf("open vswitch: memory %d MiB", cfg.MemMiB)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	dir, err := os.MkdirTemp(cfg.Parent, "ovs-")
	if err != nil {
		return nil, fmt.Errorf("open vswitch: %w", err)
	}
	o = &OVS{Dir: dir, Tools: tools, timeout: cfg.Timeout, prefix: newPrefix()}
	if cfg.Huge != nil {
		o.huge = cfg.Huge.Dir
	}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("open vswitch: %w", err), o.Stop(cfg.Timeout))
			o = nil
		}
	}()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OVS_") {
			o.env = append(o.env, kv)
		}
	}
	o.env = append(o.env, "OVS_RUNDIR="+dir, "OVS_DBDIR="+dir, "OVS_LOGDIR="+dir, "OVS_SYSCONFDIR="+dir,
		"OVS_PKGDATADIR="+filepath.Dir(tools.Schema))

	db := filepath.Join(dir, ovsDB)
	if _, err := o.run(ctx, tools.DBTool, "create", db, tools.Schema); err != nil {
		return o, err
	}
	o.db, err = o.start("ovsdb-server", exec.Command(tools.DBServer, db,
		"--remote=punix:"+filepath.Join(dir, ovsDBSocket), "--unixctl="+filepath.Join(dir, "ovsdb-server.ctl"),
		"--pidfile="+filepath.Join(dir, "ovsdb-server.pid"), "--log-file="+filepath.Join(dir, "ovsdb-server.log"),
		"--no-chdir", "-vconsole:warn"))
	if err != nil {
		return o, err
	}
	if err := o.waitFor(ctx, o.db, "its socket", func() (bool, error) {
		_, err := os.Stat(filepath.Join(dir, ovsDBSocket))
		return err == nil, nil
	}); err != nil {
		return o, err
	}
	other := map[string]string{}
	if !cfg.NoDPDK {
		other = map[string]string{
			"dpdk-init":         "true",
			"dpdk-extra":        fmt.Sprintf("--file-prefix=%s --huge-dir=%s --no-pci", o.prefix, cfg.Huge.Dir),
			"dpdk-socket-mem":   strconv.Itoa(cfg.MemMiB),
			"dpdk-socket-limit": strconv.Itoa(cfg.MemMiB),
		}
	}
	for k, v := range cfg.OtherConfig {
		other[k] = v
	}
	set := []string{"--no-wait", "--", "init"}
	if len(other) > 0 {
		set = append(set, "--", "set", "Open_vSwitch", ".")
	}
	keys := make([]string, 0, len(other))
	for k := range other {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		set = append(set, fmt.Sprintf("other_config:%s=%s", k, strconv.Quote(other[k])))
	}
	if _, err := o.Vsctl(ctx, set...); err != nil {
		return o, err
	}
	vswitchd := exec.Command(tools.Vswitchd, "unix:"+filepath.Join(dir, ovsDBSocket),
		"--unixctl="+filepath.Join(dir, ovsVswitchdCtl), "--pidfile="+filepath.Join(dir, "ovs-vswitchd.pid"),
		"--log-file="+filepath.Join(dir, ovsVswitchdLog), "--no-chdir",
		"--disable-system", "--disable-system-route", "-vconsole:warn")
	vswitchd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if o.vswitchd, err = o.start("ovs-vswitchd", vswitchd); err != nil {
		return o, err
	}
	if cfg.NoDPDK {
		if err := o.waitFor(ctx, o.vswitchd, "its control socket", func() (bool, error) {
			_, err := o.Appctl(ctx, "version")
			return err == nil, nil
		}); err != nil {
			return o, err
		}
		return o, nil
	}
	if err := o.waitFor(ctx, o.vswitchd, "DPDK initialised", func() (bool, error) {
		out, err := o.Vsctl(ctx, "get", "Open_vSwitch", ".", "dpdk_initialized")
		return strings.TrimSpace(out) == "true", err
	}); err != nil {
		return o, err
	}
	return o, nil
}

// start starts one of the daemons in the run directory's environment.
func (o *OVS) start(name string, cmd *exec.Cmd) (*child, error) {
	cmd.Env, cmd.Dir = o.env, o.Dir
	return startChild(name, cmd)
}

// waitFor polls cond until it holds, failing if the daemon exits, ctx
// ends or the timeout passes.
func (o *OVS) waitFor(ctx context.Context, c *child, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(o.timeout)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if c.Exited() {
			return fmt.Errorf("%s exited (%v) before %s:\n%s", c.name, c.err, what, o.Log())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s within %v (last: %v):\n%s", c.name, what, o.timeout, err, o.Log())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run runs one of the tools in the run directory's environment and
// returns its output.
func (o *OVS) run(ctx context.Context, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout+5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env, cmd.Dir = o.env, o.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return string(out), ctx.Err()
		}
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Vsctl runs ovs-vsctl on this database; a command that changes the
// configuration returns once ovs-vswitchd has applied it.
func (o *OVS) Vsctl(ctx context.Context, args ...string) (string, error) {
	return o.run(ctx, o.Tools.Vsctl, append([]string{"--db=unix:" + filepath.Join(o.Dir, ovsDBSocket), o.timeoutFlag()}, args...)...)
}

// Appctl runs ovs-appctl on this ovs-vswitchd.
func (o *OVS) Appctl(ctx context.Context, args ...string) (string, error) {
	return o.run(ctx, o.Tools.Appctl, append([]string{"-t", filepath.Join(o.Dir, ovsVswitchdCtl), o.timeoutFlag()}, args...)...)
}

// timeoutFlag bounds a command's wait for a daemon, in whole seconds (0
// would mean forever).
func (o *OVS) timeoutFlag() string {
	return fmt.Sprintf("--timeout=%d", max(1, int(o.timeout.Seconds())))
}

// Pid is ovs-vswitchd's.
func (o *OVS) Pid() int { return o.vswitchd.Pid() }

// Exited reports whether ovs-vswitchd or ovsdb-server has ended.
func (o *OVS) Exited() bool {
	return (o.vswitchd != nil && o.vswitchd.Exited()) || (o.db != nil && o.db.Exited())
}

// Log is the end of ovs-vswitchd's log and console, for an error.
func (o *OVS) Log() string {
	var b strings.Builder
	if log, err := os.ReadFile(filepath.Join(o.Dir, ovsVswitchdLog)); err == nil {
		b.WriteString(tailOf(string(log)))
	}
	for _, c := range []*child{o.db, o.vswitchd} {
		if c != nil && c.out.Len() > 0 {
			fmt.Fprintf(&b, "\n%s printed:\n%s", c.name, c.tail())
		}
	}
	return b.String()
}

// Stop stops ovs-vswitchd and then ovsdb-server (SIGTERM, and SIGKILL by
// their PIDs after timeout), and removes DPDK's files and the run
// directory. It may be called again.
func (o *OVS) Stop(timeout time.Duration) error {
	o.once.Do(func() {
		var errs []error
		for _, c := range []*child{o.vswitchd, o.db} {
			if c != nil {
				errs = append(errs, c.terminate(timeout))
			}
		}
		errs = append(errs, removeEALFiles(o.huge, o.prefix))
		if err := os.RemoveAll(o.Dir); err != nil {
			errs = append(errs, err)
		}
		o.stopErr = errors.Join(errs...)
	})
	return o.stopErr
}

// PMDStats is what one PMD thread counted, as `ovs-appctl
// dpif-netdev/pmd-stats-show` prints it: cumulative, in packets and TSC
// cycles.
type PMDStats struct {
	Core             int    `json:"core"`
	Packets          uint64 `json:"packets"`
	EMCHits          uint64 `json:"emc_hits"`
	SMCHits          uint64 `json:"smc_hits"`
	MegaflowHits     uint64 `json:"megaflow_hits"`
	Upcalls          uint64 `json:"upcalls"`
	FailedUpcalls    uint64 `json:"failed_upcalls"`
	IdleCycles       uint64 `json:"idle_cycles"`
	ProcessingCycles uint64 `json:"processing_cycles"`
}

// Sub returns a-b, counter by counter.
func (a PMDStats) Sub(b PMDStats) PMDStats {
	return PMDStats{Core: a.Core, Packets: a.Packets - b.Packets, EMCHits: a.EMCHits - b.EMCHits, SMCHits: a.SMCHits - b.SMCHits,
		MegaflowHits: a.MegaflowHits - b.MegaflowHits, Upcalls: a.Upcalls - b.Upcalls, FailedUpcalls: a.FailedUpcalls - b.FailedUpcalls,
		IdleCycles: a.IdleCycles - b.IdleCycles, ProcessingCycles: a.ProcessingCycles - b.ProcessingCycles}
}

// ParsePMDStats returns the PMD threads' counters of one
// pmd-stats-show's output, in the order printed; the main thread's block
// is left out.
func ParsePMDStats(out string) []PMDStats {
	var stats []PMDStats
	var cur *PMDStats
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, " ") {
			cur = nil
			var numa, core int
			if _, err := fmt.Sscanf(line, "pmd thread numa_id %d core_id %d:", &numa, &core); err == nil {
				stats = append(stats, PMDStats{Core: core})
				cur = &stats[len(stats)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		f := strings.Fields(value)
		if !ok || len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue // averages and percentages
		}
		switch key {
		case "packets received":
			cur.Packets = n
		case "emc hits":
			cur.EMCHits = n
		case "smc hits":
			cur.SMCHits = n
		case "megaflow hits":
			cur.MegaflowHits = n
		case "miss with success upcall":
			cur.Upcalls = n
		case "miss with failed upcall":
			cur.FailedUpcalls = n
		case "idle cycles":
			cur.IdleCycles = n
		case "processing cycles":
			cur.ProcessingCycles = n
		}
	}
	return stats
}

// PMDStats returns the PMD threads' counters now.
func (o *OVS) PMDStats(ctx context.Context) ([]PMDStats, error) {
	out, err := o.Appctl(ctx, "dpif-netdev/pmd-stats-show")
	if err != nil {
		return nil, err
	}
	s := ParsePMDStats(out)
	if len(s) == 0 {
		return nil, fmt.Errorf("pmd-stats-show printed no PMD thread:\n%s", tailOf(out))
	}
	return s, nil
}
