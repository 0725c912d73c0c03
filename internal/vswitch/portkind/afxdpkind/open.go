package afxdpkind

import (
	"errors"
	"fmt"

	"softnet.dev/afxdp"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/port"
	"softnet.dev/tun"
)

// Open attaches the port to its interface, its UMEM a class of the
// switch's pool.
func (o *Options) Open(name string, c portkind.Common, q int, h portkind.Host) (portkind.Opened, error) {
	cfg := o.Config(name, c, q)
	cfg.Pool, cfg.Log = h.Pool, h.Log
	p, err := afxdp.Open(cfg)
	if err != nil {
		return nil, err
	}
	return opened{p}, nil
}

// opened is an open afxdp port.
type opened struct{ p *afxdp.Port }

func (v opened) Port() port.Port { return v.p }

func (v opened) Describe() []any {
	mode, zc, mb := v.p.Mode()
	cfg := v.p.Config()
	return []any{"info", v.p.Info().String(), "dev", cfg.Dev, "netns", cfg.NetNS, "xdp", mode.String(), "zero_copy", zc, "multi_buffer", mb}
}

// Stats are the port's counters; those a TAP device has too go where
// its are, so that every view (drops, metrics) shows them alike.
func (v opened) Stats() portkind.Stats {
	s := v.p.Stats()
	mode, zc, mb := v.p.Mode()
	return portkind.Stats{Own: &Counters{Stats: s, Mode: mode.String(), ZeroCopy: zc, MultiBuffer: mb}, Stats: tun.Stats{
		RxPackets: s.RxPackets, RxBytes: s.RxBytes, TxPackets: s.TxPackets, TxBytes: s.TxBytes,
		RxDrops: s.RxDrops, TxDrops: s.TxDrops,
		Segmented: s.Segmented, Segments: s.Segments, CsumFinished: s.CsumFinished,
	}}
}

func (v opened) Change(portkind.Options) error {
	return errors.New("an afxdp port's options change only with a reopen")
}

// Counters are an afxdp port's own counters: how it runs, what it did
// in software for want of offloads, its system calls and its loans.
type Counters struct {
	afxdp.Stats
	Mode        string `json:"mode"`
	ZeroCopy    bool   `json:"zero_copy"`
	MultiBuffer bool   `json:"multi_buffer"`
}

func (*Counters) Key() string { return "afxdp" }

func (*Counters) Summary(string) string { return "" }

func (v *Counters) Offloads(port string) string {
	copied, frames := "copy mode", "frames in one buffer"
	if v.ZeroCopy {
		copied = "zero-copy"
	}
	if v.MultiBuffer {
		frames = "multi-buffer"
	}
	return fmt.Sprintf("%s (afxdp, %s XDP, %s, %s): no offloads: %d received checksums finished, %d segmented into %d, %d checksums finished; %d system calls in, %d out; %d frames lent to the kernel (fill target %d, %d refills cut short); %d frames passed to the kernel's stack",
		port, v.Mode, copied, frames, v.RxCsumFinished, v.Segmented, v.Segments, v.CsumFinished, v.RxCalls, v.TxCalls, v.Lent, v.FillTarget, v.FillShort, v.XDPPass)
}

// Collect gives the system calls, the frames passed to the kernel's
// stack and the work done for want of offloads.
func (v *Counters) Collect(add func(m *portkind.Metric, n uint64, labels ...string)) {
	add(mCalls, v.RxCalls, "rx")
	add(mCalls, v.TxCalls, "tx")
	add(mPassed, v.XDPPass)
	add(mFixed, v.RxCsumFinished, "rx_csum")
	add(mFixed, v.Segmented, "segmented")
	add(mFixed, v.CsumFinished, "csum")
}
