//go:build linux

package dpdk

import (
	"os"
	"strings"
	"testing"
)

// testdata/show-port-stats.txt is what testpmd 22.11 printed for `show
// port stats all` twice over two virtio-user ports, with the start
// command's output before it.
func TestParsePortStats(t *testing.T) {
	b, err := os.ReadFile("testdata/show-port-stats.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := ParsePortStats(string(b))
	want := []PortStats{
		{Port: 0, RxPackets: 625088, RxBytes: 40005632, TxPackets: 624960, TxBytes: 39997440},
		{Port: 1, RxPackets: 624832, RxBytes: 39989248, TxPackets: 625216, TxBytes: 40013824},
		{Port: 0, RxPackets: 5936800, RxBytes: 379955200, TxPackets: 5936640, TxBytes: 379944960},
		{Port: 1, RxPackets: 5936512, RxBytes: 379936768, TxPackets: 5936928, TxBytes: 379963392},
	}
	if len(got) != len(want) {
		t.Fatalf("%d blocks, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("block %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// A block cut short (the process still printing it) is not counted.
	if n := len(ParsePortStats(string(b[:len(b)-100]))); n != 3 {
		t.Errorf("%d blocks in output cut inside the last, want 3", n)
	}
}

// Without testpmd the error names the package to install.
func TestFindNamesThePackage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Find()
	if err == nil || !strings.Contains(err.Error(), "Debian package dpdk-dev") {
		t.Fatalf("Find without testpmd: %v", err)
	}
	if _, err := Start(Config{}); err == nil || !strings.Contains(err.Error(), "dpdk-dev") {
		t.Fatalf("Start without testpmd: %v", err)
	}
}
