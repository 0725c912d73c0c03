package lab

import (
	"math"
	"os"
	"strings"
	"testing"
)

// The samples in testdata are iperf3 3.12 clients' --json output, captured
// between two namespaces joined by a veth pair (2 s each).
func readSample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseIperf3UDP(t *testing.T) {
	res, err := parseIperf3(readSample(t, "iperf3-udp.json"), false)
	if err != nil {
		t.Fatal(err)
	}
	// end.sum_received: what the server got, not what the client sent.
	if math.Abs(res.bitsPerSecond-3883878371.1761) > 1 {
		t.Errorf("rate %v, want the receiver's 3.88 Gbit/s", res.bitsPerSecond)
	}
	if res.packets != 1066973-407308 || res.lost != 407308 || !res.hasLoss {
		t.Errorf("packets %d lost %d", res.packets, res.lost)
	}
	if math.Abs(res.lossPct-38.1735536415524) > 1e-9 || res.hasRetransmits {
		t.Errorf("loss %v%%, retransmits %v", res.lossPct, res.hasRetransmits)
	}
	if math.Abs(res.seconds-2.000118) > 1e-9 {
		t.Errorf("seconds %v", res.seconds)
	}
}

func TestParseIperf3TCP(t *testing.T) {
	res, err := parseIperf3(readSample(t, "iperf3-tcp.json"), true)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(res.bitsPerSecond-16445918420.918474) > 1 {
		t.Errorf("rate %v, want the receiver's", res.bitsPerSecond)
	}
	if !res.hasRetransmits || res.retransmits != 8628 || res.hasLoss {
		t.Errorf("retransmits %d (%v), loss %v", res.retransmits, res.hasRetransmits, res.hasLoss)
	}
}

func TestParseIperf3Errors(t *testing.T) {
	_, err := parseIperf3(readSample(t, "iperf3-error.json"), true)
	if err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("iperf3's own error: got %v", err)
	}
	// A TCP report read as UDP has no receiver datagrams.
	if _, err := parseIperf3(readSample(t, "iperf3-tcp.json"), false); err == nil {
		t.Error("TCP output parsed as UDP")
	}
	for _, bad := range []string{"", "{", `{"end":{}}`, `{"end":{"sum_received":{"seconds":0,"bits_per_second":1},"sum_sent":{}}}`} {
		if _, err := parseIperf3([]byte(bad), true); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Before iperf3 had sum_received for UDP, "sum" carried the sender's
// bytes and the receiver's loss: the received rate is computed from the
// datagrams that arrived.
func TestParseIperf3OldUDP(t *testing.T) {
	old := `{"start":{"test_start":{"protocol":"UDP","blksize":1000}},
	  "end":{"sum":{"seconds":2,"bytes":99999999,"bits_per_second":4e8,"packets":100000,"lost_packets":25000,"lost_percent":25}}}`
	res, err := parseIperf3([]byte(old), false)
	if err != nil {
		t.Fatal(err)
	}
	if want := 75000.0 * 1000 * 8 / 2; res.bitsPerSecond != want || res.packets != 75000 || res.lossPct != 25 {
		t.Errorf("got %+v, want %v bit/s", res, want)
	}
}
