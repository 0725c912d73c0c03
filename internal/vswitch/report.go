package vswitch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/engine"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/program"
)

// Report is what the switch prints, and writes as JSON, when it stops.
type Report struct {
	Ports   []engine.PortStats   `json:"ports"`
	Workers []engine.WorkerStats `json:"workers"`
	Drops   drop.Counts          `json:"drops"` // every drop, by reason, ports' own included
	Buffers buffer.Stats         `json:"buffers"`
	Leaked  int                  `json:"leaked_buffers"`
	Leak    string               `json:"leak_check,omitempty"` // "ok" or the leak check's error; "" while running
	// Devices are the ports' counters as their kinds keep them.
	Devices []DeviceStats `json:"devices"`
	// Services are the built-in services' counters.
	Services []ServiceStats `json:"services,omitempty"`
	// Learning is the L3 forwarder's (TUN ports), Bridge the bridge's
	// (TAP ports): what they learned and refused to learn.
	Learning *program.LearnStats  `json:"learning,omitempty"`
	Bridge   *program.BridgeStats `json:"bridge,omitempty"`
	// HeapAllocs is the process's heap allocations so far, exact
	// (runtime.MemStats.Mallocs), counted before the rest of the report
	// was read; only the control API's GET /v1/stats sets it.
	HeapAllocs uint64 `json:"heap_allocs,omitempty"`
}

// DeviceStats are one port's counters as its kind keeps them: those
// every port has (packets, bytes, drops by reason, offloads done in
// software or passed on, GRO), the kernel's own since the switch opened
// the device, for a port that is a kernel device (nil if they could not
// be read, a deleted device's, with KernelErr saying why), and the
// kind's own, which JSON has under the kind's key (portkind.Counters).
type DeviceStats struct {
	Port string `json:"port"`
	portkind.Stats
}

// deviceJSON is DeviceStats' JSON without the kind's own counters.
type deviceJSON DeviceStats

// MarshalJSON writes the port's counters with its kind's own.
func (d DeviceStats) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(deviceJSON(d))
	if err != nil || d.Own == nil {
		return b, err
	}
	own, err := json.Marshal(map[string]portkind.Counters{d.Own.Key(): d.Own})
	if err != nil {
		return nil, err
	}
	return append(append(b[:len(b)-1], ','), own[1:]...), nil
}

// UnmarshalJSON reads what MarshalJSON wrote, with the kind's own
// counters of whichever kind's key it finds.
func (d *DeviceStats) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, (*deviceJSON)(d)); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	for _, k := range kinds {
		if k.NewCounters == nil {
			continue
		}
		own := k.NewCounters()
		if raw, ok := keys[own.Key()]; ok {
			d.Own = own
			return json.Unmarshal(raw, own)
		}
	}
	return nil
}

func newReport(s engine.Stats) *Report {
	return &Report{Ports: s.Ports, Workers: s.Workers, Drops: s.Buffers.Drops, Buffers: s.Buffers}
}

func (r *Report) setLeak(err error) {
	r.Leak = "ok"
	if err == nil {
		return
	}
	r.Leak = err.Error()
	var leak *buffer.LeakError
	if errors.As(err, &leak) {
		r.Leaked = leak.Outstanding
	}
}

// WriteText prints the report as tables.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "port\trx packets\trx bytes\ttx packets\ttx bytes\ttx dropped\tdropped\tstate")
	for _, p := range r.Ports {
		state := "up"
		if p.Down {
			state = "down: " + p.Err
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Name, p.RxPackets, p.RxBytes, p.TxPackets, p.TxBytes, p.TxDropped, p.Drops.Total(), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ndrops by reason:")
	any := false
	for reason, n := range r.Drops {
		if n > 0 {
			fmt.Fprintf(w, "  %-16s %d\n", drop.Reason(reason), n)
			any = true
		}
	}
	if !any {
		fmt.Fprintln(w, "  none")
	}
	// Per port, the verdicts' drops: where spoofing (IP_RPFILTER,
	// MAC_SPOOF, ...) came from.
	for _, p := range r.Ports {
		if p.Drops.Total() == 0 {
			continue
		}
		fmt.Fprintf(w, "  from %s:", p.Name)
		for reason, n := range p.Drops {
			if n > 0 {
				fmt.Fprintf(w, " %s %d", drop.Reason(reason), n)
			}
		}
		fmt.Fprintln(w)
	}
	if l := r.Learning; l != nil {
		fmt.Fprintf(w, "\nlearned hosts: %d now; %d learned, %d moved, %d moves refused, %d not learned (table full), %d not allowed, %d aged out\n",
			l.Hosts, l.Learned, l.Moved, l.MovesRefused, l.Full, l.NotAllowed, l.Aged)
	}
	if b := r.Bridge; b != nil {
		fmt.Fprintf(w, "\nbridge stations: %d now; %d learned, %d moved, %d moves refused, %d not learned (table or port share full), %d aged out\n",
			b.Stations, b.Learned, b.Moved, b.MovesRefused, b.Full, b.Aged)
	}
	for _, d := range r.Devices {
		if d.Own != nil {
			if s := d.Own.Summary(d.Port); s != "" {
				fmt.Fprintf(w, "\n%s\n", s)
			}
		}
	}
	if err := r.writeKernel(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\noffloads:")
	for _, d := range r.Devices {
		if d.Own != nil {
			if line := d.Own.Offloads(d.Port); line != "" {
				fmt.Fprintf(w, "  %s\n", line)
				continue
			}
		}
		fmt.Fprintf(w, "  %s: GSO in %d, GSO out %d, segmented %d into %d, checksums finished %d, coalesced %d from %d packets\n",
			d.Port, d.GSOIn, d.GSOOut, d.Segmented, d.Segments, d.CsumFinished, d.Coalesced, d.CoalescedSegs)
	}
	for _, s := range r.Services {
		e := s.Endpoint
		fmt.Fprintf(w, "\nservice %s: %d datagrams, %d bytes, %d echoed, %d not echoed; lent %d, refilled %d, reclaimed %d, dropped %d\n",
			s.Service, s.Packets, s.Bytes, s.Echoed, s.Dropped, e.Lent, e.Refilled, e.Reclaimed, e.Drops.Total())
	}
	fmt.Fprintf(w, "\nbuffers: %d in pool, cache hit rate %.1f%%, %d remote frees\n", r.Buffers.Capacity, 100*r.Buffers.HitRate(), r.Buffers.RemoteFrees)
	if r.Leak != "" {
		fmt.Fprintf(w, "leak check: %s\n", r.Leak)
	}
	return nil
}

// kernel reports whether the port is a kernel device, whose kernel
// counters were read or could not be.
func (d DeviceStats) kernel() bool { return d.Kernel != nil || d.KernelErr != "" }

// writeKernel prints the devices' kernel counters, guest side: what each
// guest sent that its device's queue had no room for never reached
// softnet, and shows only here.
func (r *Report) writeKernel(w io.Writer) error {
	if !slices.ContainsFunc(r.Devices, DeviceStats.kernel) {
		return nil
	}
	fmt.Fprintln(w, "\ndevices, as the kernel counts them (TX: from the guest toward softnet; TX dropped: the device's queue was full):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  port\ttx packets\ttx dropped\trx packets\trx dropped\terrors")
	for _, d := range r.Devices {
		if !d.kernel() {
			continue
		}
		if k := d.Kernel; k != nil {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\n", d.Port, k.TxPackets, k.TxDropped, k.RxPackets, k.RxDropped, k.RxErrors+k.TxErrors)
		} else {
			fmt.Fprintf(tw, "  %s\tunknown: %s\n", d.Port, d.KernelErr)
		}
	}
	return tw.Flush()
}
