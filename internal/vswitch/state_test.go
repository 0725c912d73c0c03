package vswitch

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"softnet.dev/internal/vswitch/portkind"
)

// A state reads back as the configuration it was written from, origins
// and pods included; a pod that is not a pod's name is refused.
func TestStateRoundTrip(t *testing.T) {
	cfg, err := ParseConfig("f", strings.NewReader("workers 2\nport tun:a,queues=2\nport tun:b,netns=x,allow=198.18.0.0/16\nroute 198.18.1.0/24=a\nroute 198.18.2.0/24=b\nservice udp-echo:198.18.0.1:7\nfilter deny proto=udp dport=53\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Ports[1].Origin, cfg.Routes[1].Origin, cfg.Routes[0].Origin = FromAPI, FromAPI, FromAgent
	cfg.Ports[1].Pod = Pod{Namespace: "shop", Name: "web-0", InfraContainerID: "9e9e"}
	got, err := ParseState("s", cfg.MarshalState())
	if err != nil {
		t.Fatal(err)
	}
	if got.Text() != cfg.Text() || got.Ports[0].Origin != FromConfig || got.Ports[1].Origin != FromAPI || got.Routes[1].Origin != FromAPI || got.Routes[0].Origin != FromAgent ||
		!got.Ports[0].Pod.IsZero() || got.Ports[1].Pod != cfg.Ports[1].Pod {
		t.Errorf("read back\n%s%v, want\n%s", got.Text(), got, cfg.Text())
	}
	bad := strings.Replace(string(cfg.MarshalState()), `"web-0"`, `"web\"}"`, 1)
	if _, err := ParseState("s", []byte(bad)); err == nil || !strings.Contains(err.Error(), "pod name") {
		t.Errorf("a state with a hostile pod name: %v", err)
	}
}

// Each change is saved before it is made, and one that cannot be saved
// is refused (ErrState) and not made; a change the switch refuses is
// not saved.
func TestSwitchSavesBeforeChanging(t *testing.T) {
	sw, err := Open(Config{}, Tuning{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := sw.Close(); err != nil {
			t.Error(err)
		}
	}()
	var saved []string
	var last Config
	fail := false
	sw.SetSave(func(cfg Config) error {
		if fail {
			return errors.New("disk full")
		}
		last = cfg
		var names []string
		for _, p := range cfg.Ports {
			names = append(names, p.Name)
		}
		saved = append(saved, strings.Join(names, " "))
		return nil
	})
	dir := t.TempDir()
	vp := func(name string) PortSpec {
		p := mustParse(t, "vhost-user:"+name+",socket="+filepath.Join(dir, name))
		p.Origin = FromAPI
		return p
	}
	for _, n := range []string{"v1", "v2"} {
		if err := sw.AddPort(vp(n), slog.Attr{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.AddPort(vp("v1"), slog.Attr{}); !errors.Is(err, ErrExists) {
		t.Errorf("a second v1: %v", err)
	}
	// A change in place is saved too, keeping the port's origin.
	rate := []portkind.Field{{Key: "ingress-rate", Value: "1M"}}
	if _, err := sw.ChangePort("v1", rate, slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	if p := last.Ports[0]; p.Ingress.Rate != 1e6 || p.Origin != FromAPI {
		t.Errorf("saved %s (%s) after port set", p, p.Origin)
	}
	fail = true
	if _, err := sw.ChangePort("v1", []portkind.Field{{Key: "ingress-rate", Value: "2M"}}, slog.Attr{}); !errors.Is(err, ErrState) {
		t.Errorf("change, not saved: %v", err)
	}
	if p := sw.Ports()[0].Spec; p.Ingress.Rate != 1e6 {
		t.Errorf("a change not saved was made: %s", p)
	}
	if err := sw.AddPort(vp("v3"), slog.Attr{}); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("add, not saved: %v", err)
	}
	if err := sw.RemovePort("v1", slog.Attr{}); !errors.Is(err, ErrState) {
		t.Errorf("remove, not saved: %v", err)
	}
	fail = false
	if err := sw.RemovePort("v2", slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"v1", "v1 v2", "v1 v2", "v1"}; !slices.Equal(saved, want) {
		t.Errorf("saved %q, want %q", saved, want)
	}
	var names []string
	for _, pv := range sw.Ports() {
		names = append(names, pv.Spec.Name+" "+pv.Spec.Origin.String())
	}
	if !slices.Equal(names, []string{"v1 api"}) {
		t.Errorf("ports %q", names)
	}
}

func mustParse(t *testing.T, spec string) PortSpec {
	t.Helper()
	p, err := ParsePort(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Open with Tuning.Restore leaves out a port the API made whose device
// cannot be opened, and opens the others; a configuration's such port
// still fails it, as does any without Restore.
func TestOpenRestoreSkips(t *testing.T) {
	dir := t.TempDir()
	port := func(name, sock string, o Origin) PortSpec {
		p := mustParse(t, "vhost-user:"+name+",socket="+sock)
		p.Origin = o
		return p
	}
	bad := filepath.Join(dir, "no-such-dir", "vu.sock")
	cfg := Config{Ports: []PortSpec{port("vu1", filepath.Join(dir, "vu1"), FromAPI), port("vu2", bad, FromAPI), port("vu3", filepath.Join(dir, "vu3"), FromConfig)}}
	sw, err := Open(cfg, Tuning{Restore: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if s := sw.Skipped(); len(s) != 1 || s[0].Spec.Name != "vu2" || !strings.Contains(s[0].Err.Error(), "no-such-dir") {
		t.Errorf("skipped %+v", s)
	}
	var got []string
	for _, pv := range sw.Ports() {
		got = append(got, fmt.Sprintf("%s@%d", pv.Spec.Name, pv.Index))
	}
	if !slices.Equal(got, []string{"vu1@0", "vu3@1"}) {
		t.Errorf("ports %q", got)
	}
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Ports[1].Origin = FromConfig
	if sw, err := Open(cfg, Tuning{Restore: true}, slog.New(slog.DiscardHandler)); err == nil {
		sw.abandon()
		t.Error("a configuration's port that cannot be opened was left out")
	}
	cfg.Ports[1].Origin = FromAPI
	if sw, err := Open(cfg, Tuning{}, slog.New(slog.DiscardHandler)); err == nil {
		sw.abandon()
		t.Error("without Restore, a port that cannot be opened was left out")
	}
}
