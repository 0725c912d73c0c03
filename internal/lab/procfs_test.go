package lab

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a ')' of its own: fields are counted
	// from the last ')'. utime 250 + stime 50 ticks = 3 s.
	stat := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 3 0 100 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	got, err := parseStatCPU([]byte(stat))
	if err != nil || got != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "4242 no parens S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 x 50 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) returned no error", bad)
		}
	}
}

func TestThreadAndProcessCPU(t *testing.T) {
	// Burn a little CPU on a known thread, then read it back.
	tid := unix.Gettid()
	end := time.Now().Add(60 * time.Millisecond)
	for time.Now().Before(end) {
	}
	if _, err := threadCPU(tid); err != nil {
		t.Fatalf("threadCPU(own thread): %v", err)
	}
	if _, err := threadCPU(1 << 30); err == nil {
		t.Error("threadCPU of a thread that does not exist returned no error")
	}
	if cpu, err := processCPU(); err != nil || cpu <= 0 {
		t.Errorf("processCPU = %v, %v", cpu, err)
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tsoftnet\nVmPeak:\t  2000 kB\nVmHWM:\t    2164 kB\nVmRSS:\t    2000 kB\nThreads:\t5\n"
	if got, err := parseStatusKB([]byte(status), "VmHWM"); err != nil || got != 2164<<10 {
		t.Fatalf("VmHWM = %d, %v; want %d", got, err, 2164<<10)
	}
	if _, err := parseStatusKB([]byte(status), "VmSwap"); err == nil {
		t.Error("missing key: no error")
	}
	if _, err := parseStatusKB([]byte(status), "Threads"); err == nil {
		t.Error("a value without kB: no error")
	}
	if rss, err := peakRSS(); err != nil || rss <= 0 {
		t.Errorf("peakRSS = %d, %v", rss, err)
	}
}

// Captured from /proc/net/snmp and /proc/net/snmp6 of the reference
// machine (counters changed).
const (
	snmpSample = `Ip: Forwarding DefaultTTL InReceives InHdrErrors
Ip: 1 64 12345 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 573775 0 884983 62 884980 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 7 0 0 0 0
`
	snmp6Sample = "Udp6InDatagrams                 \t12\nUdp6RcvbufErrors                \t3\nUdpLite6RcvbufErrors            \t9\n"
)

func TestParseSNMP(t *testing.T) {
	if got, err := parseSNMP([]byte(snmpSample), "Udp", "RcvbufErrors"); err != nil || got != 884980 {
		t.Fatalf("Udp RcvbufErrors = %d, %v", got, err)
	}
	if _, err := parseSNMP([]byte(snmpSample), "Udp", "NoSuchCounter"); err == nil {
		t.Error("unknown counter: no error")
	}
	if _, err := parseSNMP([]byte(snmpSample), "Tcp", "RetransSegs"); err == nil {
		t.Error("missing protocol: no error")
	}
	if got, err := parseSNMP6([]byte(snmp6Sample), "Udp6RcvbufErrors"); err != nil || got != 3 {
		t.Fatalf("Udp6RcvbufErrors = %d, %v", got, err)
	}
	if _, err := parseSNMP6([]byte(snmp6Sample), "Udp6NoPorts"); err == nil {
		t.Error("missing counter: no error")
	}
}
