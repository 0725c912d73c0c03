package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softnet.dev/internal/vswitch"
	"softnet.dev/vhostuser"
)

// vhost-user ports are added and removed live through the API, like TAP
// ports: a switch that starts with no port takes them, and the port's
// socket exists while the port does.
func TestAPIVhostUserPort(t *testing.T) {
	dir := t.TempDir()
	sw, err := vswitch.Open(vswitch.Config{}, vswitch.Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	ls := &liveSwitch{sw: sw, socket: filepath.Join(dir, "softnet.sock")}
	ln, err := Listen(ls.socket, -1)
	if err != nil {
		t.Fatal(err)
	}
	ls.srv, ls.served = NewServer(sw, slog.New(slog.NewTextHandler(io.Discard, nil))), make(chan error, 1)
	go func() { ls.served <- ls.srv.Serve(ln) }()
	t.Cleanup(func() { ls.stop(t, nil) })
	ls.client = NewClient(ls.socket)
	ctx := context.Background()

	vsock := filepath.Join(dir, "vm1.sock")
	var added Port
	if err := ls.client.Post(ctx, "/v1/ports", map[string]string{"spec": "vhost-user:vm1,socket=" + vsock + ",mac=02:00:00:00:00:07"}, &added); err != nil {
		t.Fatal(err)
	}
	if added.Name != "vm1" || added.Created || added.MACs != "02:00:00:00:00:07" || !strings.HasPrefix(added.Spec, "vhost-user:vm1,socket="+vsock) || !strings.Contains(added.Info, "L2") {
		t.Errorf("added port %+v", added)
	}
	if fi, err := os.Stat(vsock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the port's socket: %v, %v", fi, err)
	}
	// A second port on the same socket is refused; one of a kind the
	// switch does not bridge too.
	for _, spec := range []string{"vhost-user:vm2,socket=" + vsock, "tun:ct9"} {
		var refused *RefusedError
		if err := ls.client.Post(ctx, "/v1/ports", map[string]string{"spec": spec}, &added); !errors.As(err, &refused) || refused.Status != 400 {
			t.Errorf("port add %s: %v", spec, err)
		}
	}
	// The API's JSON, as docs/api.md has it: the port's own counters
	// under vhost_user.
	var rep struct {
		Devices []struct {
			VhostUser *vhostuser.Stats `json:"vhost_user"`
		} `json:"devices"`
	}
	if err := ls.client.Get(ctx, "/v1/stats", &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Devices) != 1 || rep.Devices[0].VhostUser == nil || rep.Devices[0].VhostUser.Connected {
		t.Errorf("stats' devices %+v", rep.Devices)
	}
	// The port waits for its VM, and says so: in port show, in the
	// stats' text and in the metrics.
	var shown Port
	if err := ls.client.Get(ctx, "/v1/ports/vm1", &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Kind != "vhost-user" || shown.State != "no front-end connected" || shown.StateDetail.Get("frontend") != "waiting" ||
		shown.Options.Get("socket") != vsock || len(shown.Options) != 1 || shown.Device != "" || shown.Netns != "" || shown.Queues != 1 || shown.Down {
		t.Errorf("port show vm1: %+v", shown)
	}
	var refusedShow *RefusedError
	if err := ls.client.Get(ctx, "/v1/ports/vm9", &shown); !errors.As(err, &refusedShow) || refusedShow.Status != 404 || !strings.Contains(refusedShow.Message, "vm9") {
		t.Errorf("port show of no such port: %v", err)
	}
	var stations []Station
	if err := ls.client.Get(ctx, "/v1/fdb", &stations); err != nil || stations == nil || len(stations) != 0 {
		t.Errorf("fdb of a bridge that learned nothing: %v, %v", stations, err)
	}
	var waiting vswitch.Report
	if err := ls.client.Get(ctx, "/v1/stats", &waiting); err != nil {
		t.Fatal(err)
	}
	var waitingText strings.Builder
	if err := waiting.WriteText(&waitingText); err != nil || !strings.Contains(waitingText.String(), "vm1 (vhost-user): no front-end connected;") {
		t.Errorf("the stats' text (%v) does not say the port waits:\n%s", err, waitingText.String())
	}
	rec0 := httptest.NewRecorder()
	MetricsHandler(sw).ServeHTTP(rec0, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range []string{`softnet_vhost_user_frontend_connected{port="vm1"} 0`, `softnet_vhost_user_queue_pairs_enabled{port="vm1"} 0`,
		"# TYPE softnet_vhost_user_frontend_connected gauge"} {
		if !strings.Contains(rec0.Body.String(), line+"\n") {
			t.Errorf("metrics without %s", line)
		}
	}
	if strings.Contains(rec0.Body.String(), "softnet_vhost_user_feature{") {
		t.Error("features negotiated without a front-end")
	}

	// A front-end that sends a header of version 2: refused, and the
	// refusal is in the stats, their text and the metrics.
	fe, err := net.Dial("unix", vsock)
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	if _, err := fe.Write([]byte{1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := ls.client.Get(ctx, "/v1/stats", &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Devices) == 1 && rep.Devices[0].VhostUser != nil && rep.Devices[0].VhostUser.Refusals[vhostuser.RefusedMalformed] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no malformed message counted in the stats: %+v", rep.Devices)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// softnet ctl stats prints the report it reads from the same JSON.
	var full vswitch.Report
	if err := ls.client.Get(ctx, "/v1/stats", &full); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := full.WriteText(&text); err != nil || !strings.Contains(text.String(), "refused of the front-end and guest: malformed 1\n") {
		t.Errorf("the stats' text (%v) does not show the refusal:\n%s", err, text.String())
	}
	rec := httptest.NewRecorder()
	MetricsHandler(sw).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range []string{`softnet_vhost_user_refusals_total{port="vm1",reason="malformed"} 1`, `softnet_vhost_user_refusals_total{port="vm1",reason="not_eventfd"} 0`} {
		if !strings.Contains(rec.Body.String(), line+"\n") {
			t.Errorf("metrics without %s", line)
		}
	}
	if err := ls.client.Delete(ctx, "/v1/ports/vm1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vsock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket of a removed port: %v", err)
	}
}
