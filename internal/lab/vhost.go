package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/dpdk"
	"softnet.dev/internal/vswitch"
	"softnet.dev/vhostuser"
)

// The vhost-user measurement (Options.Vhost, `softnet lab --vhost`): one
// DPDK testpmd with two virtio-user ports, as two VMs' virtio-net
// devices, is the traffic source and sink; its ports are joined by a
// back-end: (a) softnet's two vhost-user ports bridged in one switch,
// one worker, opened as `softnet switch` opens them; (b) the reference,
// a second testpmd with two net_vhost ports forwarding between them (io
// mode); (c) Open vSwitch with DPDK, the switch operators run for VMs
// instead (vhostovs.go): a netdev bridge of two dpdkvhostuser ports, the
// NORMAL action, one PMD thread. testpmd forwards in mac mode: what port
// 0 receives leaves port 1 and the other way round, each port's own
// address as the source and the other's as the destination (--eth-peer),
// so a learning bridge sees each station on one port. A first burst on each port (tx_first) then
// circulates through the back-end until testpmd stops: a loop, bounded in
// time, whose rate is the back-end's. Two busy processes per
// configuration on a two-CPU machine: the front-end's forwarding lcore on
// CPU 1, the back-end's (testpmd's, softnet's worker or Open vSwitch's
// PMD) pinned to CPU 0.

// Names of the back-ends of a --vhost run.
const (
	VhostSoftnet = "softnet"
	VhostDPDK    = "dpdk-vhost"
	VhostOVS     = "ovs-dpdk"
)

// VhostBackends are the back-ends of a --vhost run, in the order each
// frame size measures them.
var VhostBackends = []string{VhostSoftnet, VhostDPDK, VhostOVS}

// Frame sizes a --vhost run measures: packets per second with the
// smallest, bits per second with full-size frames.
var vhostFrames = []int{64, 1500}

const (
	vhostMemMiB   = 256 // each testpmd's hugepage memory (-m)
	vhostMbufs    = 8192
	vhostRingSize = 256
	// vhostBursts are the front-end's first bursts per port (32 packets
	// each): what circulates, within what the rings hold.
	vhostBursts = 4
	vhostStart  = 60 * time.Second // for testpmd to map its memory and start its ports
	vhostStop   = 20 * time.Second
)

// The front-end's ports' addresses.
var vhostMACs = [2]string{"02:5e:00:00:00:01", "02:5e:00:00:00:02"}

// VhostResult is what a --vhost run measured.
type VhostResult struct {
	// Runs are each back-end's figures per frame size, in run order.
	Runs []VhostRun
	// Skipped says which back-ends were left out and why (a package that
	// is not installed).
	Skipped []string
	// OVSVersion is Open vSwitch's and its DPDK's, if it ran.
	OVSVersion string
	// TUN64PPS is softnet's TUN path in the same run: the lab's udp64
	// transfer through softnet's default variant, datagrams received per
	// second; TUNLeak that switch's leak check.
	TUN64PPS float64
	TUNLeak  string
	TUNError string // why the TUN path has no figure, if it has none
}

// VhostRun is one back-end at one frame size.
type VhostRun struct {
	Backend string
	Frame   int // bytes per frame
	Seconds float64
	// Packets and Bytes the front-end received over the window, both
	// ports: each went through the back-end once.
	Packets, Bytes uint64
	PPS, Gbps      float64
	// BackendCPUPct is the back-end process's CPU time over the window,
	// all its threads, in percent of one CPU (softnet's: the lab's
	// process, in which the switch runs); CPUPerPacketNS that over
	// Packets. WorkerCPUPerPacketNS is the CPU time of the back-end's
	// forwarding thread alone over Packets: softnet's worker, Open
	// vSwitch's PMD thread, testpmd's forwarding lcore.
	BackendCPUPct        float64
	CPUPerPacketNS       float64
	WorkerCPUPerPacketNS *float64
	// AllocsPerPacket are the heap allocations of the lab's process (the
	// switch's) per packet over the window; softnet only.
	AllocsPerPacket *float64
	// The front-end's own losses over the window: packets its ports
	// could not take (RX-missed) or send (TX-errors).
	FrontendMissed, FrontendTxErrors uint64
	// softnet's vhost-user ports over the whole configuration: drops by
	// reason (from and to the guests), refused descriptor chains, the
	// features the front-end negotiated; and the switch's leak check.
	Drops     *drop.Counts
	BadChains uint64
	Features  uint64
	Leak      string
	// Worker is what softnet's worker and ports did over the window,
	// to tell a worker that polls from one that sleeps; softnet only.
	Worker *VhostActivity
	// PMD is what Open vSwitch's PMD thread counted over the window: its
	// flow-cache hits and the TSC cycles it spent; ovs-dpdk only.
	PMD *dpdk.PMDStats
	// Placement is where the back-end's forwarding thread and the
	// front-end's ran over the window (placement.go).
	Placement *Placement
}

// VhostActivity is softnet's worker and vhost-user ports over a window.
type VhostActivity struct {
	Rounds     uint64 `json:"rounds"`      // poll rounds
	BusyRounds uint64 `json:"busy_rounds"` // rounds that found packets
	Sleeps     uint64 `json:"sleeps"`      // waits in epoll for a kick
	Calls      uint64 `json:"calls"`       // notifications sent to the guests
}

// sub returns a-b, counter by counter.
func (a VhostActivity) sub(b VhostActivity) VhostActivity {
	return VhostActivity{Rounds: a.Rounds - b.Rounds, BusyRounds: a.BusyRounds - b.BusyRounds, Sleeps: a.Sleeps - b.Sleeps, Calls: a.Calls - b.Calls}
}

// run returns the figures of backend at frame bytes, or nil.
func (v *VhostResult) run(backend string, frame int) *VhostRun {
	for i := range v.Runs {
		if v.Runs[i].Backend == backend && v.Runs[i].Frame == frame {
			return &v.Runs[i]
		}
	}
	return nil
}

// vhostDirPrefix is how the names of this process's --vhost directories
// (os.TempDir()) begin.
func vhostDirPrefix() string { return fmt.Sprintf("softnet-lab-vhost-%d-", os.Getpid()) }

// vhostEnv is what the configurations of a --vhost run share.
type vhostEnv struct {
	huge    *dpdk.Hugepages // the front-end's and the reference's
	ovsHuge *dpdk.Hugepages // Open vSwitch's, if it runs
	dir     string          // for the back-ends' sockets and Open vSwitch's run directories
}

// runVhost is the vhost-user measurement; it fills rep.Vhost as it goes.
func runVhost(ctx context.Context, o Options, gen generator, rep *Report) (err error) {
	if _, err := dpdk.Find(); err != nil {
		return fmt.Errorf("softnet lab --vhost: %w", err)
	}
	vr := &VhostResult{}
	backends, err := vr.backends(o)
	if err != nil {
		return fmt.Errorf("softnet lab --vhost: %w", err)
	}
	rep.Vhost = vr
	u := &undoStack{}
	defer func() {
		if uerr := u.unwind(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	// The front-end and, for the reference, the back-end testpmd; Open
	// vSwitch's DPDK on pages of its own.
	env := vhostEnv{}
	o.Progress(fmt.Sprintf("reserving %d MiB of hugepages", 2*vhostMemMiB))
	if env.huge, err = dpdk.ReserveHugepages(2 * vhostMemMiB); err != nil {
		return fmt.Errorf("hugepages: %w", err)
	}
	u.push("hugepages", env.huge.Release)
	if slices.Contains(backends, VhostOVS) {
		o.Progress(fmt.Sprintf("reserving %d MiB of hugepages for Open vSwitch", ovsMemMiB))
		if env.ovsHuge, err = dpdk.ReserveInMemoryHugepages(ovsMemMiB); err != nil {
			return fmt.Errorf("hugepages for Open vSwitch: %w", err)
		}
		u.push("Open vSwitch's hugepages", env.ovsHuge.Release)
	}
	if env.dir, err = os.MkdirTemp("", vhostDirPrefix()); err != nil {
		return err
	}
	u.push("socket directory", func() error { return os.RemoveAll(env.dir) })
	var errs []error
	for _, frame := range vhostFrames {
		for _, backend := range backends {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			o.Progress(fmt.Sprintf("%s back-end, %d-byte frames, for %v", backend, frame, o.Duration))
			// The switch's worker carries the configuration's name in CPU
			// profiles: go tool pprof -tagfocus variant=softnet-64.
			var r *VhostRun
			var err error
			pprof.Do(ctx, pprof.Labels("variant", fmt.Sprintf("%s-%d", backend, frame)), func(ctx context.Context) {
				r, err = measureVhost(ctx, o, env, backend, frame)
			})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				errs = append(errs, fmt.Errorf("%s, %d B: %w", backend, frame, err))
				o.Progress(fmt.Sprintf("      failed: %v", err))
				continue
			}
			vr.Runs = append(vr.Runs, *r)
			o.Progress(fmt.Sprintf("      %.3f Mpps, %.2f Gbit/s; back-end CPU %.0f%%, %.0f ns per packet (%s per packet in its forwarding thread)",
				r.PPS/1e6, r.Gbps, r.BackendCPUPct, r.CPUPerPacketNS, fmtOpt(r.WorkerCPUPerPacketNS, "%.0f ns")))
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if slices.Contains(backends, VhostSoftnet) {
		if err := vhostTUN(ctx, o, gen, rep); err != nil {
			errs = append(errs, fmt.Errorf("softnet TUN path: %w", err))
		}
	}
	return errors.Join(errs...)
}

// backends returns the back-ends the run measures: o.VhostBackends, or
// all, less Open vSwitch when it is not installed (noted in v.Skipped)
// and not asked for by name.
func (v *VhostResult) backends(o Options) ([]string, error) {
	backends := o.VhostBackends
	if len(backends) == 0 {
		backends = VhostBackends
	}
	if !slices.Contains(backends, VhostOVS) {
		return backends, nil
	}
	tools, err := dpdk.FindOVS()
	switch {
	case err == nil:
		v.OVSVersion = tools.Version
		return backends, nil
	case len(o.VhostBackends) > 0:
		return nil, fmt.Errorf("%s: %w", VhostOVS, err)
	}
	v.Skipped = append(v.Skipped, fmt.Sprintf("%s: %v", VhostOVS, err))
	o.Progress(fmt.Sprintf("skipping the %s back-end: %v", VhostOVS, err))
	return slices.DeleteFunc(slices.Clone(backends), func(b string) bool { return b == VhostOVS }), nil
}

// vhostTUN measures softnet's TUN path at 64 bytes as the lab's udp64
// transfer does, through softnet's default variant.
func vhostTUN(ctx context.Context, o Options, gen generator, rep *Report) error {
	vr := rep.Vhost
	o.Progress(fmt.Sprintf("softnet's TUN path: udp64 for %v", o.Duration))
	to := o
	to.Modes, to.Peers, to.Ladder, to.TAP = []Mode{UDP64}, false, false, false
	v := Variants(to)[0]
	res, err := runVariant(ctx, to, generators{main: gen}, newRunID(), 0, v, rep)
	if res != nil {
		vr.TUNLeak = res.Leak
		if r := res.result(UDP64); r != nil {
			vr.TUN64PPS = r.PPS
		}
	}
	if err != nil {
		vr.TUNError = err.Error()
		return err
	}
	if vr.TUN64PPS == 0 {
		vr.TUNError = "no datagram received"
		return errors.New(vr.TUNError)
	}
	return nil
}

// vhostBackend is what joins the front-end's two ports.
type vhostBackend interface {
	// sockets are the vhost-user sockets the front-end connects to.
	sockets() [2]string
	// ready waits until the front-end's ports are connected and running.
	ready(ctx context.Context, fe *dpdk.Process) error
	cpu() (time.Duration, error) // the back-end process's CPU time, all its threads
	// thread returns its forwarding thread's CPU time: softnet's worker,
	// Open vSwitch's PMD, testpmd's forwarding lcore.
	thread() (time.Duration, error)
	// forwarder is that thread, once ready.
	forwarder() taskRef
	// window opens the window of what the back-end counts itself; what it
	// returns closes it and puts in r what was counted over it (softnet's
	// worker rounds, Open vSwitch's PMD statistics).
	window(ctx context.Context) (closeWindow func(r *VhostRun) error, err error)
	// finish fills what the back-end itself counted and closes it.
	finish(r *VhostRun) error
}

// openVhostBackend starts a back-end, its sockets in env.dir.
func openVhostBackend(ctx context.Context, o Options, env vhostEnv, backend string) (vhostBackend, error) {
	socks := [2]string{filepath.Join(env.dir, backend+"-0.sock"), filepath.Join(env.dir, backend+"-1.sock")}
	for _, s := range socks {
		os.Remove(s) // the previous frame size's, if its back-end left it
	}
	switch backend {
	case VhostSoftnet:
		return openSoftnetVhost(o, socks)
	case VhostDPDK:
		return openDPDKVhost(ctx, env.huge, socks)
	case VhostOVS:
		return openOVSVhost(ctx, env.ovsHuge, env.dir)
	}
	return nil, fmt.Errorf("no back-end %q", backend)
}

// measureVhost runs one configuration: the back-end, the front-end on
// it, the window, and everything taken down again.
func measureVhost(ctx context.Context, o Options, env vhostEnv, backend string, frame int) (r *VhostRun, err error) {
	u := &undoStack{}
	defer func() {
		if uerr := u.unwind(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	r = &VhostRun{Backend: backend, Frame: frame}
	be, err := openVhostBackend(ctx, o, env, backend)
	if err != nil {
		return nil, err
	}
	closed := false
	u.push(backend+" back-end", func() error {
		if closed {
			return nil
		}
		closed = true
		return be.finish(r)
	})
	fe, err := startFrontend(env.huge, be.sockets(), frame)
	if err != nil {
		return r, err
	}
	u.push("front-end testpmd", func() error { return fe.Stop(true, vhostStop) })
	if err := fe.WaitFor(ctx, 0, dpdk.Prompt, vhostStart); err != nil {
		return r, fmt.Errorf("front-end: %w", err)
	}
	if err := be.ready(ctx, fe); err != nil {
		return r, err
	}
	if err := fe.Command(fmt.Sprintf("start tx_first %d", vhostBursts)); err != nil {
		return r, err
	}
	settle := max(minSettle, o.Duration/10)
	if !sleepCtx(ctx, settle) {
		return r, ctx.Err()
	}
	runtime.GC()
	s0, t0, err := fe.Stats(ctx, 2)
	if err != nil {
		return r, err
	}
	c0, err := be.cpu()
	if err != nil {
		return r, err
	}
	w0, err := be.thread()
	if err != nil {
		return r, err
	}
	feTID, err := threadNamed(fe.Pid(), dpdkLcoreThreads...)
	if err != nil {
		return r, fmt.Errorf("front-end's forwarding lcore: %w", err)
	}
	placement, err := startPlacement([]taskRef{be.forwarder(), {role: "front-end", pid: fe.Pid(), tid: feTID}})
	if err != nil {
		return r, err
	}
	closeWindow, err := be.window(ctx)
	if err != nil {
		placement.finish()
		return r, err
	}
	m0 := readMallocs()
	if !sleepCtx(ctx, o.Duration) {
		placement.finish()
		return r, ctx.Err()
	}
	m1 := readMallocs()
	if r.Placement, err = placement.finish(); err != nil {
		return r, err
	}
	s1, t1, err := fe.Stats(ctx, 2)
	if err != nil {
		return r, err
	}
	c1, err := be.cpu()
	if err != nil {
		return r, err
	}
	w1, err := be.thread()
	if err != nil {
		return r, err
	}
	if err := closeWindow(r); err != nil {
		return r, err
	}
	window := t1.Sub(t0)
	r.Seconds = window.Seconds()
	for i := range s1 {
		r.Packets += s1[i].RxPackets - s0[i].RxPackets
		r.Bytes += s1[i].RxBytes - s0[i].RxBytes
		r.FrontendMissed += s1[i].RxMissed - s0[i].RxMissed
		r.FrontendTxErrors += s1[i].TxErrors - s0[i].TxErrors
	}
	r.PPS = float64(r.Packets) / r.Seconds
	r.Gbps = float64(r.Bytes) * 8 / r.Seconds / 1e9
	r.BackendCPUPct = 100 * float64(c1-c0) / float64(window)
	if r.Packets == 0 {
		return r, fmt.Errorf("no packet went round the loop in %v", window)
	}
	r.CPUPerPacketNS = float64(c1-c0) / float64(r.Packets)
	r.WorkerCPUPerPacketNS = ptr(float64(w1-w0) / float64(r.Packets))
	if backend == VhostSoftnet {
		r.AllocsPerPacket = ptr(float64(m1-m0) / float64(r.Packets))
	}
	// The front-end stops before the back-end's counters are read.
	if err := fe.Stop(true, vhostStop); err != nil {
		return r, err
	}
	closed = true
	return r, be.finish(r)
}

// startFrontend starts the front-end: interactive, so that the lab
// starts and reads it; forwarding on CPU 1.
func startFrontend(huge *dpdk.Hugepages, socks [2]string, frame int) (*dpdk.Process, error) {
	cfg := dpdk.Config{Lcores: fmt.Sprintf("%d,%d", vhostBackendCPU, vhostFrontendCPU), Huge: huge, MemMiB: vhostMemMiB, Interactive: true,
		Args: []string{"--forward-mode=mac", "--nb-cores=1", fmt.Sprintf("--total-num-mbufs=%d", vhostMbufs),
			fmt.Sprintf("--txpkts=%d", frame),
			"--eth-peer=0," + vhostMACs[1], "--eth-peer=1," + vhostMACs[0]}}
	for i, s := range socks {
		cfg.Vdevs = append(cfg.Vdevs, fmt.Sprintf("net_virtio_user%d,path=%s,queues=1,queue_size=%d,mac=%s", i, s, vhostRingSize, vhostMACs[i]))
	}
	return dpdk.Start(cfg)
}

// vhostSoftnetTuning is how an operator runs a switch for VMs: the
// default busy polling, and the worker pinned to a CPU of its own
// (`softnet switch --cpus 0`), the one the reference back-end's lcore
// has. Unpinned, the scheduler wakes the worker on the CPU of the
// front-end that kicked it, where the two take turns.
var vhostSoftnetTuning = vswitch.Tuning{CPUs: strconv.Itoa(vhostBackendCPU)}

// The CPUs of a --vhost run: the back-end's (softnet's worker or the
// reference testpmd's forwarding lcore) and the front-end's forwarding
// lcore.
const (
	vhostBackendCPU  = 0
	vhostFrontendCPU = 1
)

// softnetVhost is softnet's back-end: a switch of two vhost-user ports.
type softnetVhost struct {
	sp       *softnetPath
	socks    [2]string
	features uint64 // as negotiated: a port forgets them when the front-end leaves
}

func openSoftnetVhost(o Options, socks [2]string) (*softnetVhost, error) {
	cfg := vswitch.Config{Workers: 1}
	for i, s := range socks {
		spec, err := vswitch.ParsePort(fmt.Sprintf("vhost-user:vu%d,socket=%s", i, s))
		if err != nil {
			return nil, err
		}
		cfg.Ports = append(cfg.Ports, spec)
	}
	tuning := vhostSoftnetTuning
	if o.VhostUnpinned {
		tuning.CPUs = ""
	}
	sp, err := openSoftnet(cfg, tuning, o.Log)
	if err != nil {
		return nil, err
	}
	return &softnetVhost{sp: sp, socks: socks}, nil
}

func (s *softnetVhost) sockets() [2]string { return s.socks }

// ready waits until both ports run both their rings.
func (s *softnetVhost) ready(ctx context.Context, fe *dpdk.Process) error {
	deadline := time.Now().Add(vhostStart)
	for {
		running := 0
		for _, vp := range s.ports() {
			if st := vp.Stats(); st.RunningRings == 2 {
				running++
				s.features = st.Features
			}
		}
		if running == 2 {
			return nil
		}
		if fe.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("%d of 2 vhost-user ports running after %v:\n%s", running, vhostStart, fe.Output())
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (s *softnetVhost) cpu() (time.Duration, error) { return processCPU() }

// ports returns the switch's vhost-user ports.
func (s *softnetVhost) ports() []*vhostuser.Port {
	var out []*vhostuser.Port
	for _, pv := range s.sp.sw.Ports() {
		if vp, ok := pv.Port.(*vhostuser.Port); ok {
			out = append(out, vp)
		}
	}
	return out
}

func (s *softnetVhost) thread() (time.Duration, error) { return threadsCPU(s.sp.workerThreads()) }

// forwarder is the switch's one worker.
func (s *softnetVhost) forwarder() taskRef {
	ref := taskRef{role: "back-end", pid: os.Getpid()}
	if tids := s.sp.workerThreads(); len(tids) > 0 {
		ref.tid = tids[0]
	}
	return ref
}

func (s *softnetVhost) window(context.Context) (func(*VhostRun) error, error) {
	a0 := s.activity()
	return func(r *VhostRun) error {
		r.Worker = ptr(s.activity().sub(a0))
		return nil
	}, nil
}

func (s *softnetVhost) activity() VhostActivity {
	var a VhostActivity
	for _, w := range s.sp.sw.Engine().Stats().Workers {
		a.Rounds += w.Rounds
		a.BusyRounds += w.BusyRounds
		a.Sleeps += w.Sleeps
	}
	for _, vp := range s.ports() {
		a.Calls += vp.Stats().Calls
	}
	return a
}

func (s *softnetVhost) finish(r *VhostRun) error {
	var drops drop.Counts
	for _, vp := range s.ports() {
		st := vp.Stats()
		drops.Add(&st.RxDrops)
		drops.Add(&st.TxDrops)
		r.BadChains += st.BadChains
	}
	r.Features = s.features
	r.Drops = &drops
	leak, err := s.sp.close()
	r.Leak = leak
	if leak != "ok" {
		err = errors.Join(err, fmt.Errorf("leak check: %s", leak))
	}
	return err
}

// dpdkVhost is the reference back-end: testpmd with two net_vhost ports
// forwarding between them (io mode), on CPU 0.
type dpdkVhost struct {
	p     *dpdk.Process
	socks [2]string
	lcore int // the forwarding lcore's thread
}

func openDPDKVhost(ctx context.Context, huge *dpdk.Hugepages, socks [2]string) (*dpdkVhost, error) {
	cfg := dpdk.Config{Lcores: fmt.Sprintf("%d,%d", vhostBackendCPU, vhostFrontendCPU), MainLcore: strconv.Itoa(vhostFrontendCPU), Huge: huge, MemMiB: vhostMemMiB,
		Args: []string{"--forward-mode=io", "--auto-start", "--nb-cores=1", fmt.Sprintf("--total-num-mbufs=%d", vhostMbufs)}}
	for i, s := range socks {
		cfg.Vdevs = append(cfg.Vdevs, fmt.Sprintf("net_vhost%d,iface=%s,queues=1", i, s))
	}
	p, err := dpdk.Start(cfg)
	if err != nil {
		return nil, err
	}
	// Its ports' sockets exist once they listen; it forwards as soon as
	// the front-end has connected.
	deadline := time.Now().Add(vhostStart)
	for _, s := range socks {
		for {
			if _, err := os.Stat(s); err == nil {
				break
			}
			if p.Exited() || time.Now().After(deadline) || !sleepCtx(ctx, 20*time.Millisecond) {
				err := fmt.Errorf("back-end testpmd: no socket %s:\n%s", s, p.Output())
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				return nil, errors.Join(err, p.Stop(false, vhostStop))
			}
		}
	}
	return &dpdkVhost{p: p, socks: socks}, nil
}

func (d *dpdkVhost) sockets() [2]string { return d.socks }

// ready: the front-end's prompt comes after its ports started, which
// needs the back-end's answers. Its forwarding lcore, the only one
// besides the main lcore, is EAL's worker thread (named rte-worker-N by
// DPDK 22.11, dpdk-worker-N by later ones).
func (d *dpdkVhost) ready(context.Context, *dpdk.Process) error {
	tid, err := threadNamed(d.p.Pid(), dpdkLcoreThreads...)
	if err != nil {
		return fmt.Errorf("back-end testpmd's forwarding lcore: %w", err)
	}
	d.lcore = tid
	return nil
}

func (d *dpdkVhost) cpu() (time.Duration, error) { return otherProcessCPU(d.p.Pid()) }

func (d *dpdkVhost) thread() (time.Duration, error) { return taskCPU(d.p.Pid(), d.lcore) }

func (d *dpdkVhost) forwarder() taskRef {
	return taskRef{role: "back-end", pid: d.p.Pid(), tid: d.lcore}
}

// dpdkLcoreThreads are how EAL names a forwarding lcore's thread:
// rte-worker-N (DPDK 22.11), dpdk-worker-N or lcore-worker-N (later).
var dpdkLcoreThreads = []string{"rte-worker", "dpdk-worker", "lcore-worker"}

func (d *dpdkVhost) window(context.Context) (func(*VhostRun) error, error) {
	return func(*VhostRun) error { return nil }, nil
}

func (d *dpdkVhost) finish(*VhostRun) error { return d.p.Stop(false, vhostStop) }
