package control

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"testing"
)

// A node agent's port and routes: a routed vxlan port with no remote
// yet, made with the agent's origin, then its remotes, VTEP MACs and
// routes set in one PATCH each time, as nodes join, move and leave.
func TestAPIAgentPortAndRoutes(t *testing.T) {
	ls := startLive(t)
	ls.ns[0].AddAddr(t, "lo", netip.MustParsePrefix("198.18.60.1/32"))
	status, body := ls.call(t, "POST", "/v1/ports", `{"spec": "vxlan:agentvx,vni=9,local=198.18.60.1,mode=l3,vtep-mac=02:00:00:00:60:01,netns=`+ls.ns[0].Name+`", "origin": "agent"}`)
	if status != http.StatusCreated || body["origin"] != "agent" {
		t.Fatalf("POST /v1/ports: %d %v", status, body)
	}
	routesOf := func() []Route {
		t.Helper()
		var all, out []Route
		if err := ls.client.Get(context.Background(), "/v1/routes", &all); err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			if r.Port == "agentvx" {
				out = append(out, r)
			}
		}
		slices.SortFunc(out, func(a, b Route) int {
			return netip.MustParsePrefix(a.Prefix).Addr().Compare(netip.MustParsePrefix(b.Prefix).Addr())
		})
		return out
	}
	patch := func(want int, body string) map[string]any {
		t.Helper()
		status, out := ls.call(t, "PATCH", "/v1/ports/agentvx", body)
		if status != want {
			t.Fatalf("PATCH %s: %d %v, want %d", body, status, out, want)
		}
		return out
	}
	// Two nodes join.
	out := patch(http.StatusOK, `{"options": {"remote": "198.18.60.2,198.18.60.3", "fdb": "02:00:00:00:60:02@198.18.60.2,02:00:00:00:60:03@198.18.60.3"},
		"routes": [{"prefix": "198.19.2.0/24", "via": "198.18.60.2"}, {"prefix": "2001:db8:2::/64", "via": "198.18.60.2"}, {"prefix": "198.19.3.0/24", "via": "198.18.60.3"}],
		"origin": "agent"}`)
	if opts, _ := out["options"].(map[string]any); opts["remote"] != "198.18.60.2,198.18.60.3" || out["origin"] != "agent" {
		t.Errorf("port after PATCH: %v", out)
	}
	want := []Route{
		{Prefix: "198.19.2.0/24", Port: "agentvx", Via: "198.18.60.2", Origin: "agent"},
		{Prefix: "198.19.3.0/24", Port: "agentvx", Via: "198.18.60.3", Origin: "agent"},
		{Prefix: "2001:db8:2::/64", Port: "agentvx", Via: "198.18.60.2", Origin: "agent"},
	}
	if got := routesOf(); !slices.Equal(got, want) {
		t.Fatalf("routes %+v, want %+v", got, want)
	}
	// Node 3 moves to 198.18.60.4; node 2 leaves: one change.
	patch(http.StatusOK, `{"options": {"remote": "198.18.60.4", "fdb": "02:00:00:00:60:03@198.18.60.4"},
		"routes": [{"prefix": "198.19.3.0/24", "via": "198.18.60.4"}], "origin": "agent"}`)
	want = []Route{{Prefix: "198.19.3.0/24", Port: "agentvx", Via: "198.18.60.4", Origin: "agent"}}
	if got := routesOf(); !slices.Equal(got, want) {
		t.Fatalf("routes %+v, want %+v", got, want)
	}
	// Refused whole, changing nothing: a next hop that is no remote; a
	// prefix another port has; a prefix twice; a route to another port.
	for _, bad := range []struct {
		status int
		body   string
	}{
		{http.StatusBadRequest, `{"routes": [{"prefix": "198.19.5.0/24", "via": "198.18.60.5"}], "origin": "agent"}`},
		{http.StatusConflict, `{"routes": [{"prefix": "198.18.1.0/24", "via": "198.18.60.4"}], "origin": "agent"}`},
		{http.StatusBadRequest, `{"routes": [{"prefix": "198.19.3.0/24", "via": "198.18.60.4"}, {"prefix": "198.19.3.0/24", "via": "198.18.60.4"}]}`},
		{http.StatusBadRequest, `{"routes": [{"prefix": "198.19.3.0/24", "port": "ct0"}]}`},
		{http.StatusBadRequest, `{"routes": [], "origin": "kernel"}`},
	} {
		patch(bad.status, bad.body)
		if got := routesOf(); !slices.Equal(got, want) {
			t.Fatalf("a refused PATCH changed the routes: %+v", got)
		}
	}
	// The last node leaves; the port waits with no remote.
	patch(http.StatusOK, `{"options": {"remote": "", "fdb": ""}, "routes": [], "origin": "agent"}`)
	if got := routesOf(); len(got) != 0 {
		t.Fatalf("routes left: %+v", got)
	}
	if status, body := ls.call(t, "POST", "/v1/routes", `{"prefix": "198.19.9.0/24", "port": "ct0", "origin": "agent"}`); status != http.StatusCreated || body["origin"] != "agent" {
		t.Errorf("POST /v1/routes with the agent's origin: %d %v", status, body)
	}
}
