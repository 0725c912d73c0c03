// Package control is the live face of `softnet switch`: its HTTP/JSON API
// on a Unix socket (see docs/api.md), which `softnet ctl` is a client of,
// and its Prometheus metrics. Both read the counters the workers publish
// for every view, so neither a request nor a scrape costs the datapath
// anything.
//
// Anyone who can write the socket controls the switch: it is created
// with mode 0660, never world-writable.
//
// Where things are: server.go routes requests and bounds clients;
// read.go answers the GETs of state, write.go the changes; drops.go and
// capture.go each hold a stream's tap on the datapath and its handler;
// metrics.go is the Prometheus collector; client.go is what `softnet ctl`
// calls; socket.go makes the socket and learns who connected.
package control
