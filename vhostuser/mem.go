//go:build linux

package vhostuser

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// region is one mapped part of the guest's memory.
type region struct {
	memRegion
	mapping []byte // the whole mmap, from file offset 0
	data    []byte // the region: mapping[MmapOffset:][:Size]
}

// memTable is the guest's memory as SET_MEM_TABLE gave it. It is
// immutable once built; a new table replaces it whole, after every ring
// stopped using the old one.
type memTable struct {
	regions []region
	size    uint64 // the bytes its mappings take of the address space
}

// A region's file may be sparse, so a front-end can have the switch map
// terabytes that cost it nothing; and a process whose address space is
// used up fails its next mmap, the Go runtime's too, and dies. So the
// mappings of one memory table are bounded, and those of all ports
// together, which leaves most of the 128 TiB of a process on x86-64 to
// the rest of the switch.
const (
	maxTableMapping = 16 << 40
	maxMapped       = 64 << 40
)

// mappedTotal is what all ports' memory tables map.
var mappedTotal atomic.Uint64

// mapMemTable maps each region's file once. It takes ownership of fds,
// which it closes: the mappings keep the memory.
func mapMemTable(regions []memRegion, fds []int) (*memTable, error) {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) != len(regions) {
		return nil, fmt.Errorf("set mem table: %d regions but %d file descriptors", len(regions), len(fds))
	}
	if err := checkOverlaps(regions); err != nil {
		return nil, fmt.Errorf("set mem table: %w", err)
	}
	t := &memTable{}
	for i, r := range regions {
		length := r.MmapOffset + r.Size
		if length > 1<<48 {
			t.unmap()
			return nil, fmt.Errorf("set mem table: region %d: %d bytes is more than this back-end maps", i, length)
		}
		st, err := memoryFile(fds[i])
		if err != nil {
			t.unmap()
			return nil, fmt.Errorf("set mem table: region %d: %w", i, err)
		}
		// Memory past the end of the file would fault (SIGBUS) when
		// touched: the region must lie inside the file. A front-end that
		// shrinks the file later makes the accesses fault, which every
		// one survives (guard.go).
		if uint64(st.Size) < length {
			t.unmap()
			return nil, fmt.Errorf("set mem table: region %d: offset %d + size %d is past the end of its file (%d bytes)", i, r.MmapOffset, r.Size, st.Size)
		}
		// A hugetlbfs file is mapped in whole huge pages, and unmapped
		// only so: round up to the file's block size.
		mapped := length
		if bs := uint64(st.Blksize); bs > 0 && bs&(bs-1) == 0 {
			mapped = (length + bs - 1) &^ (bs - 1)
		}
		if t.size+mapped > maxTableMapping {
			t.unmap()
			return nil, fmt.Errorf("set mem table: region %d: the table would map %d bytes, more than the %d a port may", i, t.size+mapped, uint64(maxTableMapping))
		}
		if mappedTotal.Add(mapped) > maxMapped {
			mappedTotal.Add(-mapped)
			t.unmap()
			return nil, fmt.Errorf("set mem table: region %d: the ports' memory tables would map more than %d bytes", i, uint64(maxMapped))
		}
		t.size += mapped
		m, err := unix.Mmap(fds[i], 0, int(mapped), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.unmap()
			return nil, fmt.Errorf("set mem table: region %d: mmap %d bytes: %w", i, mapped, err)
		}
		t.regions = append(t.regions, region{memRegion: r, mapping: m, data: m[r.MmapOffset:length:length]})
	}
	return t, nil
}

// memoryFile returns the status of a region's file, or an error unless
// it is a file in memory: on tmpfs (memfd_create, /dev/shm) or hugetlbfs,
// where QEMU and DPDK keep guest memory. A page of any other file or
// device may take unbounded time to fault in (a file on FUSE, served by
// the front-end itself, or on NFS), and a worker that touches it would
// wait as long.
func memoryFile(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("not a regular file (mode %#o)", st.Mode)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return st, fmt.Errorf("fstatfs: %w", err)
	}
	if fs.Type != unix.TMPFS_MAGIC && fs.Type != unix.HUGETLBFS_MAGIC {
		return st, fmt.Errorf("a file on a filesystem of type %#x, not in memory (memfd, tmpfs or hugetlbfs)", fs.Type)
	}
	return st, nil
}

// checkOverlaps refuses regions whose guest or front-end address ranges
// overlap: an address in two regions would have no single meaning. (Each
// region's ranges were checked not to wrap, memRegion.check.)
func checkOverlaps(regions []memRegion) error {
	for i, a := range regions {
		for j, b := range regions[:i] {
			switch {
			case a.GuestAddr < b.GuestAddr+b.Size && b.GuestAddr < a.GuestAddr+a.Size:
				return fmt.Errorf("regions %d and %d overlap in guest memory", j, i)
			case a.UserAddr < b.UserAddr+b.Size && b.UserAddr < a.UserAddr+a.Size:
				return fmt.Errorf("regions %d and %d overlap in the front-end's address space", j, i)
			}
		}
	}
	return nil
}

// unmap releases the mappings. Nothing may use the table after.
func (t *memTable) unmap() {
	if t == nil {
		return
	}
	for i := range t.regions {
		_ = unix.Munmap(t.regions[i].mapping)
		t.regions[i] = region{}
	}
	t.regions = nil
	mappedTotal.Add(-t.size)
	t.size = 0
}

// guest returns the n bytes at guest physical address addr, or nil if
// they are not all inside one region. The arithmetic cannot overflow:
// addr-GuestAddr is below Size, and n is compared with what is left.
func (t *memTable) guest(addr uint64, n uint32) []byte {
	for i := range t.regions {
		r := &t.regions[i]
		if addr >= r.GuestAddr {
			if off := addr - r.GuestAddr; off < r.Size && uint64(n) <= r.Size-off {
				return r.data[off : off+uint64(n) : off+uint64(n)]
			}
		}
	}
	return nil
}

// user is guest for an address in the front-end's own address space,
// where SET_VRING_ADDR's addresses are.
func (t *memTable) user(addr, n uint64) []byte {
	for i := range t.regions {
		r := &t.regions[i]
		if addr >= r.UserAddr {
			if off := addr - r.UserAddr; off < r.Size && n <= r.Size-off {
				return r.data[off : off+n : off+n]
			}
		}
	}
	return nil
}
