package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"softnet.dev/drop"
	"softnet.dev/internal/bench"
)

// modeTitle describes a mode's traffic in a table's heading.
func modeTitle(m Mode, r *Report) string {
	if m == UDP {
		return fmt.Sprintf("udp: %d-byte datagrams at no rate limit (%s)", udpPayload(r.Options.IPv6), r.Traffic)
	}
	return fmt.Sprintf("tcp: one stream (%s)", r.Traffic)
}

// WriteTable prints the report: a heading, one table per mode with each
// variant's figures and ratio, what the columns mean, the leak checks and
// the goals.
func WriteTable(w io.Writer, r *Report) error {
	o := r.Options
	ports := "TUN ports, L3 forwarder"
	if o.TAP {
		ports = "TAP ports, bridge"
	}
	family := "IPv4"
	if o.IPv6 {
		family = "IPv6"
	}
	fmt.Fprintf(w, "softnet lab: %s\n", bench.Machine())
	fmt.Fprintf(w, "%v per transfer; softnet with %s, one worker; %s between two namespaces\n", o.Duration, ports, family)
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	for _, m := range o.Modes {
		if !r.hasMode(m) {
			continue // an interrupted run may not have got to it
		}
		fmt.Fprintf(w, "\n%s\n", modeTitle(m, r))
		if err := writeModeTable(w, r, m); err != nil {
			return err
		}
	}
	writeVariants(w, r)
	writeLegend(w, r)
	writeLeaks(w, r)
	writeGoals(w, r.Goals())
	return nil
}

func writeModeTable(w io.Writer, r *Report, m Mode) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	lossHdr := "loss\tlost in dev/sock"
	if m == TCP {
		lossHdr = "retrans"
	}
	fmt.Fprintf(tw, "  variant\tGbit/s\tratio\tkpps\t%s\tCPU s/Gbit\tworker\tallocs/pkt\thit rate\tremote frees\tRSS/pool MiB\tdrops\n", lossHdr)
	ratioTo := ""
	for i := range r.Variants {
		res := r.Variants[i].result(m)
		if res == nil {
			continue
		}
		ratioTo = res.RatioTo
		loss := "-"
		if m == UDP {
			loss = "-\t" + fmtLostWhere(res)
			if res.LossPct != nil {
				loss = fmt.Sprintf("%.1f%%\t%s", *res.LossPct, fmtLostWhere(res))
			}
		}
		if res.Retransmits != nil {
			loss = fmt.Sprint(*res.Retransmits)
		}
		fmt.Fprintf(tw, "  %s\t%.2f\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			res.Variant, res.Gbps, fmtRatio(res.Ratio), res.PPS/1e3, loss,
			fmtOpt(res.CPUPerGbit, "%.3f"), fmtOpt(res.WorkerCPUPerGbit, "%.3f"), fmtAllocs(res.AllocsPerPacket),
			fmtPct(res.HitRate), fmtCount(res.RemoteFrees), fmtRSS(res), fmtDrops(res.Drops, res.NoMemStalls))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ratioTo != "" {
		fmt.Fprintf(w, "  (higher is better; ratio to %s)\n", ratioTo)
	}
	return nil
}

// writeVariants says what each variant is.
func writeVariants(w io.Writer, r *Report) {
	fmt.Fprintln(w, "\nvariants")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, vr := range r.Variants {
		fmt.Fprintf(tw, "  %s\t%s\n", vr.Variant.Name, vr.Variant.Desc)
	}
	tw.Flush()
}

// writeLegend says how each column was measured.
func writeLegend(w io.Writer, r *Report) {
	less := "the lab's own idle rate"
	if r.Builtin {
		less += " and the generator's threads"
	}
	fmt.Fprintf(w, `
Gbit/s: payload received by the guest. kpps: udp datagrams received; tcp packets the
  receiving device counted (a GSO packet counts once).
lost in dev/sock: of the datagrams sent, those the sending guest's device dropped (the
  datapath did not take them in time) and those the receiving socket had no room for.
CPU s/Gbit: the process's CPU time (getrusage) over the middle of the transfer, less
  %s, per Gbit forwarded; it includes the kernel work done in the
  forwarder's system calls. worker: softnet's worker thread alone
  (/proc/self/task/TID/stat), without TX goroutines or the Go runtime.
allocs/pkt: runtime.MemStats.Mallocs over the same window per packet forwarded.
drops: softnet's packet drops by reason; nomem stalls are receive bursts cut short
  because the pool was empty (the packets wait in the kernel's queue).
`, less)
	reset := true
	for _, vr := range r.Variants {
		for _, res := range vr.Results {
			reset = reset && res.RSSReset
		}
	}
	if reset {
		fmt.Fprintln(w, "RSS: the process's peak (VmHWM, reset before each transfer) / the packet-buffer pool.")
	} else {
		fmt.Fprintln(w, "RSS: the process's peak so far (VmHWM; it could not be reset) / the packet-buffer pool.")
	}
	if r.Options.Ladder {
		fmt.Fprintln(w, "offload-on is the default configuration (+gro with io=uring where the kernel has it), measured again beside offload-off.")
	}
}

func writeLeaks(w io.Writer, r *Report) {
	var bad []string
	n := 0
	for _, vr := range r.Variants {
		if !vr.Variant.Softnet() || vr.Leak == "" {
			continue
		}
		n++
		if vr.Leak != "ok" {
			bad = append(bad, fmt.Sprintf("  %s: %s", vr.Variant.Name, vr.Leak))
		}
	}
	switch {
	case n == 0:
	case len(bad) == 0:
		fmt.Fprintf(w, "leak check: ok for every softnet variant (%d)\n", n)
	default:
		fmt.Fprintf(w, "leak check FAILED:\n%s\n", strings.Join(bad, "\n"))
	}
}

func writeGoals(w io.Writer, goals []Goal) {
	if len(goals) == 0 {
		return
	}
	fmt.Fprintln(w, "\ngoals")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	met := 0
	for _, g := range goals {
		verdict := "NOT MET"
		if g.Met {
			verdict = "met"
			met++
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", g.Mode, g.Goal, g.Figure, verdict)
	}
	fmt.Fprintf(tw, "  %d of %d goals met\n", met, len(goals))
	tw.Flush()
}

// fmtLostWhere splits a UDP transfer's loss between the sending guest's
// device and the receiving guest's socket, in percent of the datagrams
// sent.
func fmtLostWhere(res *Result) string {
	if res.SenderDevDrops == nil || res.ReceiverSocketDrops == nil || res.LossPct == nil || res.PPS == 0 {
		return "-"
	}
	received := res.PPS * res.Duration
	sent := received / (1 - min(*res.LossPct, 99.999)/100)
	return fmt.Sprintf("%.0f%%/%.0f%%", 100*float64(*res.SenderDevDrops)/sent, 100*float64(*res.ReceiverSocketDrops)/sent)
}

func fmtRatio(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

func fmtOpt(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func fmtAllocs(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v == 0:
		return "0"
	case *v < 0.01:
		return fmt.Sprintf("%.1e", *v)
	}
	return fmt.Sprintf("%.2f", *v)
}

func fmtPct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

func fmtCount(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func fmtRSS(res *Result) string {
	if res.PeakRSS == nil {
		return "-"
	}
	s := fmt.Sprintf("%.0f", float64(*res.PeakRSS)/(1<<20))
	if res.PoolBytes != nil {
		s += fmt.Sprintf("/%.0f", float64(*res.PoolBytes)/(1<<20))
	}
	return s
}

// fmtDrops lists the non-zero drop reasons, "REASON=n" each, and the
// NOMEM stalls if there were any.
func fmtDrops(d *drop.Counts, stalls *uint64) string {
	if d == nil {
		return "-"
	}
	var parts []string
	for r, n := range d {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", drop.Reason(r), n))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "0")
	}
	if stalls != nil && *stalls > 0 {
		parts = append(parts, fmt.Sprintf("(%d nomem stalls)", *stalls))
	}
	return strings.Join(parts, " ")
}
