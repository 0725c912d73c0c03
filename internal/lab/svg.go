package lab

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
)

// CheckPlotName reports whether WritePlot can write the named file: only
// SVG is drawn (by hand, without external tools).
func CheckPlotName(name string) error {
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".svg":
		return nil
	case ".png":
		return fmt.Errorf("--plot %s: PNG is not supported; write .svg (any browser shows it, and rsvg-convert or inkscape turn it into PNG)", name)
	default:
		return fmt.Errorf("--plot %s: unknown format %q; want a .svg file", name, ext)
	}
}

// Chart geometry, in SVG user units (pixels).
const (
	chartLeft    = 70.0
	chartRight   = 20.0
	chartTop     = 80.0
	chartBottom  = 60.0
	chartHeight  = 300.0 // of the plotting area
	chartMinW    = 640.0 // room for the title and legend
	groupWidth   = 110.0 // per variant
	barGap       = 4.0
	groupPadding = 16.0
)

// modeColors are the bars' fills by mode.
var modeColors = map[Mode]string{UDP: "#4e79a7", TCP: "#f28e2b", UDP64: "#76b7b2", UDPGSO: "#59a14f", TCP4: "#e15759", PDR: "#b07aa1", PDR64: "#9c755f"}

// WriteSVG draws the report as a bar chart: per variant, one bar per
// mode with its Gbit/s above it, a y axis with ticks, and a legend.
func WriteSVG(w io.Writer, r *Report) error {
	// Latency is not a rate: the chart leaves it out.
	modes := slices.DeleteFunc(slices.Clone(r.Options.Modes), func(m Mode) bool { return m.kind() == kindLatency })
	top := 0.0
	for _, vr := range r.Variants {
		for _, m := range modes {
			if res := vr.result(m); res != nil {
				top = max(top, res.Gbps)
			}
		}
	}
	step, axisMax := niceAxis(top)
	n := max(1, len(r.Variants))
	width := max(chartMinW, chartLeft+chartRight+groupWidth*float64(n))
	height := chartTop + chartHeight + chartBottom
	y := func(v float64) float64 { return chartTop + chartHeight*(1-v/axisMax) }

	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", chartLeft, esc("softnet lab: throughput received by the guest"))
	for i, line := range chartSubtitle(r) {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-size="11" fill="#555">%s</text>`+"\n", chartLeft, 42+14*i, esc(line))
	}

	// The y axis: gridlines and labels at each step.
	for v := 0.0; v <= axisMax+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", chartLeft, y(v), width-chartRight, y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", chartLeft-6, y(v)+4, esc(trimFloat(v)))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", chartLeft, chartTop, chartLeft, y(0))
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", chartLeft, y(0), width-chartRight, y(0))
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" font-size="12" text-anchor="middle">Gbit/s received</text>`+"\n", chartTop+chartHeight/2)

	// The bars.
	barW := (groupWidth - 2*groupPadding - barGap*float64(len(modes)-1)) / float64(max(1, len(modes)))
	for i, vr := range r.Variants {
		x0 := chartLeft + groupWidth*float64(i) + groupPadding
		for j, m := range modes {
			res := vr.result(m)
			if res == nil {
				continue
			}
			x := x0 + float64(j)*(barW+barGap)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
				x, y(res.Gbps), barW, y(0)-y(res.Gbps), modeColors[m], esc(fmt.Sprintf("%s %s: %.2f Gbit/s", vr.Variant.Name, m, res.Gbps)))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%.2f</text>`+"\n", x+barW/2, y(res.Gbps)-4, res.Gbps)
		}
		cx := chartLeft + groupWidth*(float64(i)+0.5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`+"\n", cx, y(0)+16, esc(vr.Variant.Name))
		var ratios []string
		for _, m := range modes {
			if res := vr.result(m); res != nil && res.Ratio > 0 {
				ratios = append(ratios, fmt.Sprintf("%.2fx", res.Ratio))
			}
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#555" text-anchor="middle">%s</text>`+"\n", cx, y(0)+30, esc(strings.Join(ratios, " / ")))
	}
	if ratioTo := chartRatioTo(r); ratioTo != "" {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#555" text-anchor="middle">%s</text>`+"\n",
			chartLeft+(width-chartLeft-chartRight)/2, y(0)+48, esc("variant; under each, its ratio to "+ratioTo+" ("+strings.ToUpper(joinModes(modes))+")"))
	}

	// The legend, top right.
	for j, m := range modes {
		x := width - chartRight - 60*float64(len(modes)-j)
		fmt.Fprintf(&b, `<rect x="%.1f" y="13" width="12" height="12" fill="%s"/>`+"\n", x, modeColors[m])
		fmt.Fprintf(&b, `<text x="%.1f" y="24" font-size="12">%s</text>`+"\n", x+16, esc(strings.ToUpper(string(m))))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// chartRatioTo returns the variant the ratios refer to, or "".
func chartRatioTo(r *Report) string {
	for _, vr := range r.Variants {
		for _, res := range vr.Results {
			if res.RatioTo != "" {
				return res.RatioTo
			}
		}
	}
	return ""
}

func joinModes(modes []Mode) string {
	var s []string
	for _, m := range modes {
		s = append(s, string(m))
	}
	return strings.Join(s, " / ")
}

// chartSubtitle says what was measured, in two lines.
func chartSubtitle(r *Report) []string {
	ports := "TUN"
	if r.Options.TAP {
		ports = "TAP"
	}
	return []string{
		fmt.Sprintf("%s, %v per transfer; softnet with %s ports, one worker", r.Traffic, r.Options.Duration, ports),
		fmt.Sprintf("UDP: %d-byte datagrams at no rate limit; TCP: one stream", udpPayload(r.Options.IPv6)),
	}
}

// niceAxis returns a tick step of 1, 2 or 5 times a power of ten giving
// about five ticks, and the axis maximum: the first tick that leaves room
// above top for the value printed over its bar.
func niceAxis(top float64) (step, axisMax float64) {
	if !(top > 0) || math.IsInf(top, 0) {
		return 1, 1
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return step, math.Ceil(top*1.05/step) * step
}

// trimFloat prints a tick value without trailing zeros.
func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writing to a bytes.Buffer does not fail
	return b.String()
}
