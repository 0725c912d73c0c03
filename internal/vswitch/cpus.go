package vswitch

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckCPUs refuses CPUs (ParseCPUs) that the process may not run on:
// a machine's missing CPUs, or those its cgroup or taskset leave out.
// Pinned there, a worker would run unpinned, on CPUs the operator meant
// to keep for the VMs; better refused at start than a warning in a log.
func CheckCPUs(cpus []int) error {
	if len(cpus) == 0 {
		return nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("the CPUs this process may use: %w", err)
	}
	for _, c := range cpus {
		if !set.IsSet(c) {
			return fmt.Errorf("CPU %d is not one this process may run on (it may use %s)", c, cpuList(&set))
		}
	}
	return nil
}

// cpuList writes set as ParseCPUs reads it: "0-3,6".
func cpuList(set *unix.CPUSet) string {
	var parts []string
	for c := 0; c < MaxCPU; c++ {
		if !set.IsSet(c) {
			continue
		}
		last := c
		for last+1 < MaxCPU && set.IsSet(last+1) {
			last++
		}
		if last == c {
			parts = append(parts, strconv.Itoa(c))
		} else {
			parts = append(parts, strconv.Itoa(c)+"-"+strconv.Itoa(last))
		}
		c = last
	}
	return strings.Join(parts, ",")
}
