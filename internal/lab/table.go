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
	o := r.Options
	switch m {
	case UDP, UDP64:
		return fmt.Sprintf("%s: %d-byte datagrams at no rate limit (%s)", m, m.payload(o.IPv6), r.Traffic)
	case UDPGSO:
		return fmt.Sprintf("%s: %d-byte datagrams sent %d per send with UDP_SEGMENT, at no rate limit (built-in generator: %s has no UDP_SEGMENT)",
			m, udpPayload(o.IPv6), gsoSegments(udpPayload(o.IPv6)), r.Traffic)
	case TCP:
		return fmt.Sprintf("tcp: one stream (%s)", r.Traffic)
	case TCP4:
		return fmt.Sprintf("tcp4: %d parallel streams (%s)", TCPStreams4, r.Traffic)
	case LatencyUDP, LatencyTCP:
		proto := "UDP"
		if m == LatencyTCP {
			proto = "TCP"
		}
		return fmt.Sprintf("%s: %s ping-pong, %s, %d-byte messages, client on CPU %d, server on CPU %d; one-way latency (half the round trip)",
			m, r.Latency, proto, SmallUDP, r.CPUs[0], r.CPUs[1])
	case PDR, PDR64:
		return fmt.Sprintf("%s: zero-loss throughput (PDR): highest offered rate of %d-byte datagrams with loss <= %g%%, %d trials of %v, receiver's socket buffer %d MiB (%s)",
			m, m.payload(o.IPv6), PDRLossPct, o.PDRSteps, o.PDRTrial, pdrRcvBuf>>20, r.Traffic)
	}
	return string(m)
}

// WriteTable prints the report: a heading, one table per mode with each
// variant's figures and ratio, what the columns mean, the leak checks and
// the goals; or the many-ports measurement's figures.
func WriteTable(w io.Writer, r *Report) error {
	if r.Ports != nil {
		return writePortsTable(w, r)
	}
	if len(r.Overlay) > 0 {
		return writeOverlayTable(w, r)
	}
	if r.Vhost != nil {
		return writeVhostTable(w, r)
	}
	if r.Bandwidth != nil {
		return writeBandwidthTable(w, r)
	}
	if r.AFXDP != nil {
		return writeAFXDPTable(w, r)
	}
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
	if o.Runs > 1 {
		fmt.Fprintf(w, "%d runs, interleaved (variant order rotated each round): medians, and the spread (half the range / median) of the main figure\n", o.Runs)
	}
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
	k := m.kind()
	switch k {
	case kindUDP:
		fmt.Fprintf(tw, "  variant\tGbit/s\tkpps\tx veth\tx wg-go\tspread\tloss\tlost in dev/sock\tfwd kpps\tCPU s/Gbit\tCPU us/pkt\tworker\tallocs/pkt\thit rate\tremote frees\tRSS/pool MiB\tdrops\n")
	case kindTCP:
		fmt.Fprintf(tw, "  variant\tGbit/s\tx veth\tx wg-go\tspread\tkpps\tretrans\tCPU s/Gbit\tworker\tallocs/pkt\thit rate\tremote frees\tRSS/pool MiB\tdrops\n")
	case kindLatency:
		fmt.Fprintf(tw, "  variant\tp50 us\tp99 us\tavg us\tx veth\tx wg-go\tspread\n")
	case kindPDR:
		fmt.Fprintf(tw, "  variant\tPDR Gbit/s\tkpps\toffered Gbit/s\tloss\tx veth\tx wg-go\tspread\tfirst failing offer\ttrials\tlimited by\n")
	}
	ratioTo := ""
	for i := range r.Variants {
		res := r.Variants[i].result(m)
		if res == nil {
			continue
		}
		ratioTo = res.RatioTo
		common := fmt.Sprintf("%s\t%s\t%s", fmtRatio(res.Ratio), fmtRatio(res.RatioWG), fmtSpread(res))
		inproc := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", fmtOpt(res.WorkerCPUPerGbit, "%.3f"), fmtAllocs(res.AllocsPerPacket),
			fmtPct(res.HitRate), fmtCount(res.RemoteFrees), fmtRSS(res), fmtDrops(res.Drops, res.NoMemStalls))
		switch k {
		case kindUDP:
			loss := "-"
			if res.LossPct != nil {
				loss = fmt.Sprintf("%.1f%%", *res.LossPct)
			}
			fmt.Fprintf(tw, "  %s\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", res.Variant, res.Gbps, res.PPS/1e3, common, loss, fmtLostWhere(res),
				fmtOpt(scale(res.ForwardedPPS, 1e-3), "%.0f"), fmtOpt(res.CPUPerGbit, "%.3f"), fmtOpt(res.CPUPerPacketUS, "%.2f"), inproc)
		case kindTCP:
			retrans := "-"
			if res.Retransmits != nil {
				retrans = fmt.Sprint(*res.Retransmits)
			}
			fmt.Fprintf(tw, "  %s\t%.2f\t%s\t%.0f\t%s\t%s\t%s\n", res.Variant, res.Gbps, common, res.PPS/1e3, retrans, fmtOpt(res.CPUPerGbit, "%.3f"), inproc)
		case kindLatency:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", res.Variant, fmtOpt(res.LatencyP50US, "%.1f"), fmtOpt(res.LatencyP99US, "%.1f"), fmtOpt(res.LatencyAvgUS, "%.1f"), common)
		case kindPDR:
			p := res.PDR
			if p == nil {
				p = &PDRResult{}
			}
			loss, bound := "-", "-"
			if res.LossPct != nil {
				loss = fmt.Sprintf("%.2f%%", *res.LossPct)
			}
			if p.BoundGbps > 0 {
				bound = fmt.Sprintf("%.3f", p.BoundGbps)
			}
			fmt.Fprintf(tw, "  %s\t%.3f\t%.0f\t%.3f\t%s\t%s\t%s\t%d\t%s\n", res.Variant, res.Gbps, res.PPS/1e3, p.OfferedGbps, loss, common, bound, p.Trials, p.Limit)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	better := "higher is better"
	if k == kindLatency {
		better = "lower is better"
	}
	if ratioTo != "" {
		fmt.Fprintf(w, "  (%s; x veth: ratio to %s, x wg-go: to %s)\n", better, ratioTo, WireguardGo)
	}
	for _, vr := range r.Variants {
		if why, ok := vr.Skipped[m]; ok {
			fmt.Fprintf(w, "  %s: skipped: %s\n", vr.Variant.Name, why)
		}
	}
	return nil
}

func scale(v *float64, f float64) *float64 {
	if v == nil {
		return nil
	}
	return ptr(*v * f)
}

// fmtSpread prints the spread of a median over several runs, "-" for one.
func fmtSpread(res *Result) string {
	if res.Runs < 2 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*res.Spread)
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
  datapath did not take them in time) and those the receiving socket had no room for
  (udp-gso: the device drops whole sends of 44).
CPU s/Gbit: the process's CPU time (getrusage) over the middle of the transfer, less
  %s, per Gbit forwarded; it includes the kernel work done in the
  forwarder's system calls. worker: softnet's worker thread alone
  (/proc/self/task/TID/stat), without TX goroutines or the Go runtime.
fwd kpps: datagrams per second that reached the receiving guest's UDP layer (delivered to the
  socket or dropped there), any datapath. CPU us/pkt: the CPU time as for CPU s/Gbit, per
  such datagram.
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
	if r.hasMode(PDR) || r.hasMode(PDR64) {
		fmt.Fprintf(w, "PDR: the first trial at no rate limit, then a binary search below the rate it sent; limited by: where\n  the datagrams of the lowest failing trial were lost.\n")
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
	if res.SenderDevPct == nil || res.ReceiverSocketPct == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%/%.0f%%", *res.SenderDevPct, *res.ReceiverSocketPct)
}

// lostWhere sets the loss split of a UDP result from its counts: the
// datagrams sent are those received over the transfer plus those lost.
func lostWhere(res *Result) {
	if res.SenderDevDrops == nil || res.ReceiverSocketDrops == nil || res.LossPct == nil || res.PPS == 0 {
		return
	}
	received := res.PPS * res.Duration
	sent := received / (1 - min(*res.LossPct, 99.999)/100)
	res.SenderDevPct = ptr(100 * float64(*res.SenderDevDrops) / sent)
	res.ReceiverSocketPct = ptr(100 * float64(*res.ReceiverSocketDrops) / sent)
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
