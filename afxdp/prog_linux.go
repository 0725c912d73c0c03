package afxdp

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// progName is the name softnet's XDP program has in the kernel (bpftool
// prog, `ip link`): how Open tells a program softnet attached from
// someone else's.
const progName = "softnet_xsk"

// The program's counters, by XDP action, in a per-CPU array: what it did
// with frames it could not redirect to a socket.
const (
	xdpDrop = 1 // XDP_DROP
	xdpPass = 2 // XDP_PASS
	nCounts = 4 // XDP_ABORTED to XDP_TX
)

// xdpProg is a port's program, its maps and its attachment.
type xdpProg struct {
	xsks   *ebpf.Map // XSKMAP: queue index -> socket
	counts *ebpf.Map // per-CPU: XDP action -> frames
	prog   *ebpf.Program
	link   link.Link
	mode   Mode
}

// instructions is the program: redirect the frame to the socket of its
// receive queue; where there is none, bpf_redirect_map returns the
// fallback action (drop, or pass to the kernel's stack), which is
// counted before it is returned.
//
//	r6 = ctx; key = ctx->rx_queue_index
//	r0 = bpf_redirect_map(&xsks, key, fallback)
//	if r0 == XDP_REDIRECT: return r0
//	counts[r0]++; return r0
func instructions(xsks, counts *ebpf.Map, fallback int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // struct xdp_md.rx_queue_index
		asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.LoadMem(asm.R2, asm.RFP, -4, asm.Word),
		asm.Mov.Imm(asm.R3, fallback),
		asm.FnRedirectMap.Call(),
		asm.JEq.Imm(asm.R0, 4, "out"), // XDP_REDIRECT
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.Word),
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "ret"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord), // per-CPU: no atomic needed
		asm.Mov.Reg(asm.R0, asm.R7).WithSymbol("ret"),
		asm.Return().WithSymbol("out"),
	}
}

// loadProg loads the program for an interface with queues receive
// queues; frags lets it take multi-buffer frames (required to attach to
// a veth whose peer's MTU exceeds a page).
func loadProg(queues int, pass, frags bool) (*xdpProg, error) {
	p := &xdpProg{}
	var err error
	if p.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softnet_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)}); err != nil {
		return nil, fmt.Errorf("XSKMAP: %w", err)
	}
	if p.counts, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softnet_xdpcnt", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: nCounts}); err != nil {
		p.close()
		return nil, fmt.Errorf("counter map: %w", err)
	}
	fallback := int32(xdpDrop)
	if pass {
		fallback = xdpPass
	}
	spec := &ebpf.ProgramSpec{
		Name:         progName,
		Type:         ebpf.XDP,
		Instructions: instructions(p.xsks, p.counts, fallback),
		License:      "Dual MIT/GPL",
	}
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	if p.prog, err = ebpf.NewProgram(spec); err != nil {
		p.close()
		return nil, fmt.Errorf("load XDP program: %w", err)
	}
	return p, nil
}

// attach attaches the program to the interface through a bpf_link: the
// kernel detaches it when the link's last descriptor is closed, which a
// process that dies does too, so a crashed switch leaves no program
// behind it.
func (p *xdpProg) attach(ifindex int, mode Mode) error {
	try := func(m Mode) error {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
		if err == nil {
			p.link, p.mode = l, m
		}
		return err
	}
	switch mode {
	case ModeAuto:
		err := try(ModeNative)
		if err == nil {
			return nil
		}
		if gerr := try(ModeGeneric); gerr != nil {
			return fmt.Errorf("attach XDP program: native: %w; generic: %w", err, gerr)
		}
		return nil
	default:
		if err := try(mode); err != nil {
			return fmt.Errorf("attach XDP program in %s mode: %w", mode, err)
		}
		return nil
	}
}

// detach closes the program's link: the interface's frames go to the
// kernel's stack again.
func (p *xdpProg) detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	return err
}

// close detaches the program and frees it and its maps.
func (p *xdpProg) close() error {
	errs := []error{p.detach()}
	if p.prog != nil {
		errs = append(errs, p.prog.Close())
	}
	for _, m := range []*ebpf.Map{p.xsks, p.counts} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// counted returns the program's counters, summed over CPUs: frames it
// dropped and frames it passed to the kernel's stack.
func (p *xdpProg) counted() (dropped, passed uint64, err error) {
	sum := func(action uint32) (uint64, error) {
		var per []uint64
		if err := p.counts.Lookup(action, &per); err != nil {
			return 0, err
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		return n, nil
	}
	if dropped, err = sum(xdpDrop); err != nil {
		return 0, 0, err
	}
	passed, err = sum(xdpPass)
	return dropped, passed, err
}

// clearStale checks the XDP program attached to the interface, if any,
// in the calling thread's namespace.
// softnet's own, attached without a link (which no living softnet does:
// a process whose links are all closed left it, or a tool loaded it by
// hand), is stale and removed. softnet's own held by a link belongs to a
// softnet that is running. Anything else is someone else's: both are
// refused, and never touched.
func clearStale(ifindex int, dev string) (removed bool, err error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", dev, err)
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		return false, nil
	}
	mode := attachModeName(x.AttachMode)
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
	if err != nil {
		return false, fmt.Errorf("%s has an XDP program (id %d, %s) that cannot be inspected (%w): refusing to touch it", dev, x.ProgId, mode, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return false, fmt.Errorf("%s has an XDP program (id %d, %s) that cannot be inspected (%w): refusing to touch it", dev, x.ProgId, mode, err)
	}
	if info.Name != progName {
		return false, fmt.Errorf("%s already has an XDP program softnet did not attach (%q, id %d, %s): refusing to replace it; if nothing uses it, remove it with `ip link set dev %s xdp off`", dev, info.Name, x.ProgId, mode, dev)
	}
	held, err := heldByLink(ifindex, x.ProgId)
	if err != nil {
		return false, fmt.Errorf("%s has softnet's XDP program (id %d): cannot tell whether a running softnet holds it: %w", dev, x.ProgId, err)
	}
	if held {
		return false, fmt.Errorf("%s has softnet's XDP program (id %d, %s) attached by a running softnet (its link is open): one port per interface", dev, x.ProgId, mode)
	}
	flags := unix.XDP_FLAGS_DRV_MODE
	if x.AttachMode == attachedSKB {
		flags = unix.XDP_FLAGS_SKB_MODE
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, -1, flags); err != nil {
		return false, fmt.Errorf("%s: remove softnet's stale XDP program (id %d): %w", dev, x.ProgId, err)
	}
	return true, nil
}

// heldByLink reports whether an XDP link holds program id on ifindex.
func heldByLink(ifindex int, id uint32) (bool, error) {
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Program != ebpf.ProgramID(id) {
			continue
		}
		if x := info.XDP(); x != nil && int(x.Ifindex) == ifindex {
			return true, nil
		}
	}
	return false, it.Err()
}

// The kernel's XDP_ATTACHED_* values.
const (
	attachedDrv   = 1
	attachedSKB   = 2
	attachedHW    = 3
	attachedMulti = 4
)

func attachModeName(m uint32) string {
	switch m {
	case attachedDrv:
		return "native mode"
	case attachedSKB:
		return "generic mode"
	case attachedHW:
		return "offloaded"
	case attachedMulti:
		return "in several modes"
	}
	return fmt.Sprintf("mode %d", m)
}
