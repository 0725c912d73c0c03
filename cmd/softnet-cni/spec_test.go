package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"softnet.dev/internal/control"
	"softnet.dev/internal/vswitch"
)

// The port specs the plugin sends the switch are pinned: a switch reads
// them as the ports they always were, and prints them back unchanged
// (CHECK and GC read them in GET /v1/ports).
func TestPortSpecs(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	specs := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req control.PortRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/ports" {
			http.Error(w, `{"error": "unexpected request"}`, http.StatusBadRequest)
			return
		}
		specs <- req.Spec
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(control.Port{Name: "x", Spec: req.Spec})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	sw := newSwitch(&netConf{Socket: sock})
	name := portName("net1", "c0ffee", "eth0")
	for mode, want := range map[string]string{
		"tun": "tun:" + name + ",netns=/var/run/netns/cni-1234,dev=eth0",
		"tap": "tap:" + name + ",netns=/var/run/netns/cni-1234,dev=eth0",
	} {
		if err := sw.addPort(context.Background(), mode, name, "/var/run/netns/cni-1234", "eth0", "", vswitch.Pod{}); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		got := <-specs
		if got != want {
			t.Errorf("%s: the plugin sent %q, want %q", mode, got, want)
		}
		p, err := vswitch.ParsePort(got)
		if err != nil || p.String() != want {
			t.Errorf("%s: %q parses to %v, %v", mode, got, p, err)
		}
	}
}
