package netnstest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestParseTableFulls(t *testing.T) {
	// /proc/net/stat/ndisc_cache of a two-CPU machine whose table was full.
	const stat = `entries  allocs   destroys hash_grows lookups  hits     res_failed rcv_probes_mcast rcv_probes_ucast periodic_gc_runs forced_gc_runs unresolved_discards table_fulls
00000403 0000c02d 0000b8a5 00000004   00003158 000018ab 0000015f   00000c07         00000dae         000000f3         0000066e       00000000            00000503
00000403 0000b862 0000bbe7 00000004   00002b92 00001531 00000146   00000b39         00000bfe         00000000         0000070f       00000000            000005c6
`
	n, err := parseTableFulls(stat)
	if err != nil || n != 0x503+0x5c6 {
		t.Fatalf("parseTableFulls = %d, %v; want %d", n, err, 0x503+0x5c6)
	}
	for _, bad := range []string{
		"entries allocs\n00000001 00000002\n",
		"entries table_fulls\n00000001\n",
		"entries table_fulls\n00000001 0000zz00\n",
	} {
		if n, err := parseTableFulls(bad); err == nil {
			t.Errorf("parseTableFulls(%q) = %d, want an error", bad, n)
		}
	}
}

func TestNeighOverflows(t *testing.T) {
	if _, err := os.Stat("/proc/net/stat/ndisc_cache"); err != nil {
		SkipOrFail(t, "no /proc/net/stat/ndisc_cache (kernel without IPv6?)")
	}
	arp0, nd0, err := NeighOverflows()
	if err != nil {
		t.Fatal(err)
	}
	arp1, nd1, err := NeighOverflows()
	if err != nil {
		t.Fatal(err)
	}
	if arp1 < arp0 || nd1 < nd0 {
		t.Errorf("the overflow counters went back: arp %d to %d, nd %d to %d", arp0, arp1, nd0, nd1)
	}
}

// A second holder, even in the same process (flock locks an open file,
// not a process), waits until the first test ends.
func TestLockHost(t *testing.T) {
	name := "locktest-" + uniqueName(t.Name())
	path := filepath.Join(os.TempDir(), "softnet-test-"+name+".lock")
	t.Cleanup(func() { os.Remove(path) })
	tryLock := func() error {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	t.Run("holder", func(t *testing.T) {
		LockHost(t, name)
		if err := tryLock(); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("a second lock while the first is held: %v, want EWOULDBLOCK", err)
		}
	})
	if err := tryLock(); err != nil {
		t.Errorf("a lock after the holder ended: %v", err)
	}
}
