//go:build race

package vswitch

// raceEnabled says the race detector slows the switch down.
const raceEnabled = true
