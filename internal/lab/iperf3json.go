package lab

import (
	"encoding/json"
	"fmt"
	"strings"
)

// iperf3Report is the part of `iperf3 --json` output (as of 3.12) the lab
// reads, on the client's side: its "end" section carries the receiver's
// figures too, sent back by the server when the test ends.
type iperf3Report struct {
	Start struct {
		Version   string `json:"version"`
		TestStart struct {
			Protocol string `json:"protocol"`
			BlkSize  int    `json:"blksize"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		Sum         *iperf3Sum `json:"sum"` // UDP: sender bytes, receiver loss
		SumSent     *iperf3Sum `json:"sum_sent"`
		SumReceived *iperf3Sum `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

type iperf3Sum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         uint64  `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   *int64  `json:"retransmits"` // TCP sender
	Packets       uint64  `json:"packets"`     // UDP: datagrams sent (received + lost)
	LostPackets   uint64  `json:"lost_packets"`
	LostPercent   float64 `json:"lost_percent"`
}

// parseIperf3 reads an iperf3 client's --json output for a UDP or a TCP
// transfer: the received rate, and the loss (UDP) or the retransmits
// (TCP), summed over its streams.
func parseIperf3(data []byte, tcp bool) (flowResult, error) {
	proto := "udp"
	if tcp {
		proto = "tcp"
	}
	var r iperf3Report
	if err := json.Unmarshal(data, &r); err != nil {
		return flowResult{}, fmt.Errorf("iperf3 output: %w", err)
	}
	if r.Error != "" {
		return flowResult{}, fmt.Errorf("iperf3: %s", r.Error)
	}
	if p := r.Start.TestStart.Protocol; p != "" && !strings.EqualFold(p, proto) {
		return flowResult{}, fmt.Errorf("iperf3 output: a %s test, want %s", p, proto)
	}
	var res flowResult
	switch proto {
	case "udp":
		rcv := r.End.SumReceived
		if rcv == nil {
			// Before sum_received existed, "sum" had the sender's bytes
			// with the receiver's loss: count what arrived from that.
			s := r.End.Sum
			if s == nil || s.Seconds <= 0 || s.Packets < s.LostPackets {
				return res, fmt.Errorf("iperf3 output: no UDP receiver summary")
			}
			blk := float64(r.Start.TestStart.BlkSize)
			if blk == 0 {
				blk = UDPPayload
			}
			res.bitsPerSecond = float64(s.Packets-s.LostPackets) * blk * 8 / s.Seconds
			rcv = s
		} else {
			res.bitsPerSecond = rcv.BitsPerSecond
		}
		if rcv.Packets < rcv.LostPackets {
			return res, fmt.Errorf("iperf3 output: %d datagrams lost of %d", rcv.LostPackets, rcv.Packets)
		}
		res.seconds = rcv.Seconds
		res.packets = rcv.Packets - rcv.LostPackets
		res.lost = rcv.LostPackets
		res.lossPct = rcv.LostPercent
		res.hasLoss = true
	case "tcp":
		rcv, snd := r.End.SumReceived, r.End.SumSent
		if rcv == nil || snd == nil {
			return res, fmt.Errorf("iperf3 output: no TCP summary")
		}
		res.bitsPerSecond = rcv.BitsPerSecond
		res.seconds = rcv.Seconds
		if snd.Retransmits != nil {
			res.retransmits = *snd.Retransmits
			res.hasRetransmits = true
		}
	}
	if res.bitsPerSecond < 0 || res.seconds <= 0 {
		return res, fmt.Errorf("iperf3 output: rate %g over %g s", res.bitsPerSecond, res.seconds)
	}
	return res, nil
}
