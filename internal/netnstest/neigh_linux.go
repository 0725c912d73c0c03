package netnstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The kernel's ARP and neighbour-discovery tables are one each for the
// whole host, not one per namespace: an entry of any namespace counts
// against net.ipv{4,6}.neigh.default.gc_thresh3 (1024 by default), which
// only the initial namespace can set. Once the table is full of entries
// younger than five seconds (or in use), the kernel cannot make a new
// one ("neighbor table overflow!" in its log): a host that must answer a
// neighbour solicitation then sends no advertisement, and its peer's
// ping ends in "Address unreachable". A test with hundreds of namespaces
// on one link needs a good part of the table, and two of them at once
// on a shared machine can exhaust it.

// NeighOverflows returns how many times, since boot, the host's ARP and
// neighbour-discovery tables were full when an entry was wanted (the
// table_fulls counters of /proc/net/stat/arp_cache and ndisc_cache).
func NeighOverflows() (arp, nd uint64, err error) {
	if arp, err = tableFulls("/proc/net/stat/arp_cache"); err != nil {
		return 0, 0, err
	}
	if nd, err = tableFulls("/proc/net/stat/ndisc_cache"); err != nil {
		return 0, 0, err
	}
	return arp, nd, nil
}

// tableFulls sums a /proc/net/stat neighbour table's table_fulls column
// over its rows, one a CPU, in hexadecimal.
func tableFulls(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("netnstest: %w", err)
	}
	n, err := parseTableFulls(string(b))
	if err != nil {
		return 0, fmt.Errorf("netnstest: %s: %w", path, err)
	}
	return n, nil
}

func parseTableFulls(s string) (uint64, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	col := -1
	for i, name := range strings.Fields(lines[0]) {
		if name == "table_fulls" {
			col = i
		}
	}
	if col < 0 {
		return 0, fmt.Errorf("no table_fulls column in %q", lines[0])
	}
	var sum uint64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) <= col {
			return 0, fmt.Errorf("short row %q", l)
		}
		n, err := strconv.ParseUint(f[col], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("table_fulls: %w", err)
		}
		sum += n
	}
	return sum, nil
}

// LockHost holds a lock named name, shared by every process on the host,
// until t ends: tests that need a host-wide resource in quantity (a
// good part of the neighbour tables, say) wait for each other, whichever
// go test process or worktree runs them.
func LockHost(t testing.TB, name string) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "softnet-test-"+name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("netnstest: lock %s: %v", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("netnstest: lock %s: %v", path, err)
	}
	// Closing the file releases the lock; so does the process's end.
	t.Cleanup(func() { f.Close() })
}
