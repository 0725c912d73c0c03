// Package vswitch is `softnet switch`: a userspace virtual switch between
// Linux TUN and TAP ports. It parses the port specifications and the
// configuration file, opens the devices (optionally inside named network
// namespaces), builds the chain — port security (each guest's allowed
// sources and MACs), then the L3 forwarder for TUN ports or the learning
// bridge for TAP ports — runs the engine until told to stop, and
// reports final per-port statistics, drop reasons, the devices' own kernel
// counters (what a guest sent that its device's full queue dropped before
// softnet saw it) and the buffer pool's leak check.
//
// A port whose device is set down stays in the switch: packets toward it
// are dropped as DEV_READY until it is up again, and its MTU is followed
// (both logged). Only a deleted device ends a port.
package vswitch
