package lab

import (
	"errors"
	"slices"
	"softnet.dev/tun"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	for _, o := range []Options{
		{Duration: 1500 * time.Millisecond},
		{Duration: 500 * time.Millisecond},
		{Duration: 2 * time.Hour},
		{Modes: []Mode{"sctp"}},
		{Modes: []Mode{UDP, UDP}},
		{Traffic: "netperf"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestVariants(t *testing.T) {
	names := func(o Options) []string {
		var out []string
		for _, v := range Variants(o) {
			out = append(out, v.Name)
		}
		return out
	}
	if got := names(Options{Peers: true}); !slices.Equal(got, []string{KernelVeth, WireguardGo, SoftnetTUN, Softnet}) {
		t.Errorf("default variants %v", got)
	}
	// wireguard-go's tun package has no TAP devices.
	if got := names(Options{Peers: true, TAP: true}); !slices.Equal(got, []string{KernelVeth, SoftnetTUN, Softnet}) {
		t.Errorf("TAP variants %v", got)
	}
	want := []string{KernelVeth, WireguardGo, SoftnetTUN, "no-cache/batch-1", "napi-cache", "+bulk", "+gro", "uring", "+busy-poll", "2-workers", "+defer", "offload-off", OffloadOn}
	if got := names(Options{Peers: true, Ladder: true}); !slices.Equal(got, want) {
		t.Errorf("ladder %v", got)
	}
	// The ladder adds one thing at a time.
	vs := Variants(Options{Ladder: true})
	c := func(name string) softnetConfig {
		for _, v := range vs {
			if v.Name == name {
				return v.softnet
			}
		}
		t.Fatalf("no %s", name)
		return softnetConfig{}
	}
	if nc := c("no-cache/batch-1"); !nc.Tuning.PoolUncached || nc.Tuning.Batch != 1 || !nc.Offload || !nc.Tuning.SingleGets {
		t.Errorf("no-cache/batch-1: %+v", nc)
	}
	if g := c("+gro"); g.Tuning.IO != tun.IOSyscall || !g.GRO || c("uring").Tuning.IO != tun.IOUring || c("uring").Tuning.BusyPoll >= 0 {
		t.Errorf("+gro %+v, uring %+v", g, c("uring"))
	}
	if b, w := c("+busy-poll"), c("2-workers"); b.Tuning.BusyPoll == 0 || b.Workers > 1 || w.Workers != 2 || w.Tuning != b.Tuning {
		t.Errorf("+busy-poll %+v, 2-workers %+v", b, w)
	}
	if c(OffloadOn) != defaultSoftnet || c("+bulk").GRO || !c("+defer").Tuning.DeferTX || !c("napi-cache").Tuning.SingleGets || c("+bulk").Tuning.SingleGets || !c("+defer").GRO || c("offload-off").Offload || c("offload-off").GRO {
		t.Errorf("ladder steps: %+v", vs)
	}
	if reference(Options{Ladder: true}) != OffloadOn || reference(Options{}) != Softnet {
		t.Error("reference variant")
	}
}

func TestUndoStack(t *testing.T) {
	var order []string
	u := &undoStack{}
	fail := errors.New("busy")
	u.push("first", func() error { order = append(order, "first"); return nil })
	u.push("second", func() error { order = append(order, "second"); return fail })
	u.push("third", func() error { order = append(order, "third"); return nil })
	err := u.unwind()
	if !slices.Equal(order, []string{"third", "second", "first"}) {
		t.Errorf("order %v", order)
	}
	if !errors.Is(err, fail) || err.Error() != "remove second: busy" {
		t.Errorf("error %v", err)
	}
	if err := u.unwind(); err != nil || len(order) != 3 {
		t.Errorf("second unwind ran steps again: %v %v", err, order)
	}
}
