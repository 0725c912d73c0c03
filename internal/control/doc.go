// Package control is the live face of `softnet switch`: its HTTP/JSON API
// on a Unix socket (see docs/api.md), which `softnet ctl` is a client of,
// and its Prometheus metrics. Both read the counters the workers publish
// for every view, so neither a request nor a scrape costs the datapath
// anything.
//
// Anyone who can write the socket controls the switch: it is created
// with mode 0660, never world-writable.
package control
