// Package vswitch is `softnet switch`: a userspace virtual switch
// between ports of several kinds (TUN and TAP devices, vhost-user
// sockets, VXLAN overlays), each a unit of its own beside package
// portkind and registered in one table (kinds.go). It parses the port
// specifications and the configuration file, opens the ports (optionally
// inside named network namespaces), builds the chain — port security
// (each guest's allowed sources and MACs), then the L3 forwarder for
// routed ports or the learning bridge for bridged ones — runs the engine
// until told to stop, and reports final per-port statistics, drop
// reasons, the devices' own kernel counters (what a guest sent that its
// device's full queue dropped before softnet saw it) and the buffer
// pool's leak check.
//
// A port whose device is set down stays in the switch: packets toward it
// are dropped as DEV_READY until it is up again, and its MTU is followed
// (both logged). Only a deleted device ends a port.
package vswitch
