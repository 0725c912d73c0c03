// Package tun makes Linux TUN and TAP devices softnet ports, and gives a
// program that runs no engine a blocking batch API over them.
//
// Open creates a device, or attaches to a persistent one, optionally in a
// network namespace (Config.NetNS), with one file per queue; FromFiles
// runs a device over files opened elsewhere. A Device is a port.Port:
// hand it to engine.New, which polls its queues and closes it. Without an
// engine, Queue(i) reads and writes bursts, and a read waits for packets:
//
//	dev, err := tun.Open(tun.Config{Name: "sn0", NetNS: "blue", Offload: true, GRO: true})
//	if err != nil {
//		return err
//	}
//	defer dev.Close()
//	n, err := dev.Queue(0).Read(bufs, sizes, 0) // or Receive into softnet buffers
//
// Config.Offload takes GSO packets and partial checksums from the kernel
// whole (package vnet); Read hands them over as plain packets unless
// Config.KeepGSO. Config.GRO merges runs of a flow into GSO packets on
// the way out. Config.IO chooses the system calls or io_uring (the
// default where the kernel has multishot reads). A link set down drops
// as drop.DevReady until it is up; a device deleted underneath ends its
// port with port.ErrDown. Neither Receive nor Transmit allocates.
//
// Design: docs/design.md, "TUN and TAP devices, offloads, GSO and GRO".
package tun
