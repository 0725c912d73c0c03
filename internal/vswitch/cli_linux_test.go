package vswitch

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/program"
)

// Every way opening the ports can fail gives tun's own message and a
// non-zero exit, with no panic and no device left behind.
func TestSwitchCommandOpenErrors(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	ns := netnstest.New(t)
	ns2 := netnstest.New(t)
	// A veth, a multi-queue TUN device, and a device another switch holds.
	mustExec(t, ns, "ip", "link", "add", "sv-veth", "type", "veth", "peer", "name", "sv-peer")
	mustExec(t, ns, "ip", "tuntap", "add", "dev", "sv-mq", "mode", "tun", "multi_queue")
	holder := exec.Command(bin, "switch", "--control=", "--port", "tun:sv-held,netns="+ns2.Name, "--port", "tun:sv-other,netns="+ns2.Name)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		holder.Process.Signal(syscall.SIGTERM)
		holder.Wait()
	})
	waitFor(t, 10*time.Second, "device of the holding switch", func() bool {
		_, err := ns2.Exec("ip", "link", "show", "sv-other")
		return err == nil
	})
	before := links(t, ns)
	good := "--port=tun:sv-good,netns=" + ns.Name // opened first, then closed again
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		want   string
		nobody bool
	}{
		{"misspelt netns", []string{good, "--port=tun:sv-x,netns=softnet-no-such-ns"}, 1, "network namespace softnet-no-such-ns: no such file or directory", false},
		{"veth", []string{good, "--port=tun:sv-veth,netns=" + ns.Name}, 1, "exists and is not a TUN/TAP device (veth)", false},
		{"held", []string{good, "--port=tun:sv-held,netns=" + ns2.Name}, 1, "attach queue 0: device or resource busy", false},
		{"queue count", []string{good, "--port=tun:sv-mq,netns=" + ns.Name}, 1, "tun sv-mq: attach queue 0", false},
		{"duplicate route", []string{good, "--port=tun:sv-y,netns=" + ns.Name, "--route=198.18.1.0/24=sv-good", "--route=198.18.1.0/24=sv-y"}, 2, "198.18.1.0/24 is already routed to sv-good", false},
		{"host bits", []string{good, "--port=tun:sv-y,netns=" + ns.Name, "--route=198.18.1.1/24=sv-good"}, 2, "host bits set", false},
		{"workers 0", []string{good, "--port=tun:sv-y,netns=" + ns.Name, "--workers=0"}, 2, "--workers 0: want 1 to", false},
		{"unwritable stats", []string{good, "--port=tun:sv-y,netns=" + ns.Name, "--stats-json=/proc/softnet-no/stats.json"}, 2, "--stats-json", false},
		{"without root", []string{good, "--port=tun:sv-y,netns=" + ns.Name}, 1, "operation not permitted", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"switch", "--control="}, c.args...)...)
			if c.nobody {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("still running after 30 s; stderr:\n%s", stderr.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Errorf("exit %v, want code %d", err, c.code)
			}
			out := stderr.String()
			if !strings.Contains(out, c.want) {
				t.Errorf("stderr lacks %q:\n%s", c.want, out)
			}
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Errorf("panicked:\n%s", out)
			}
			if after := links(t, ns); after != before {
				t.Errorf("devices before:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// --filter drops what a rule denies, counted as FILTER on the ingress
// port, and passes the rest.
func TestSwitchFilter(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	var cfg Config
	for _, s := range []string{"deny proto=udp dport=6001", "allow proto=udp"} {
		r, err := program.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Filters = append(cfg.Filters, r)
	}
	_, stop := startSwitchConfig(t, gs, cfg)
	ping(t, gs[0], gs[1].v4)
	udpExchange(t, gs[0], gs[1], 20) // port 6000: allowed
	var rx *net.UDPConn
	if err := gs[1].ns.Do(func() (err error) {
		rx, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(gs[1].v4), Port: 6001})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var tx net.Conn
	if err := gs[0].ns.Do(func() (err error) {
		tx, err = net.Dial("udp", net.JoinHostPort(gs[1].v4, "6001"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	const denied = 10
	for range denied {
		if _, err := tx.Write([]byte("denied")); err != nil {
			t.Fatal(err)
		}
	}
	// The allowed exchange after the denied datagrams shows they had
	// their chance to arrive.
	udpExchange(t, gs[0], gs[1], 5)
	rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := rx.Read(make([]byte, 64)); err == nil {
		t.Errorf("a denied datagram arrived (%d bytes)", n)
	}
	rep := stop()
	if got := rep.Ports[0].Drops[drop.Filter]; got != denied {
		t.Errorf("port %s: %d FILTER drops, want %d", rep.Ports[0].Name, got, denied)
	}
}

func mustExec(t *testing.T, ns *netnstest.NS, args ...string) {
	t.Helper()
	if out, err := ns.Exec(args...); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// links lists the namespace's devices by name.
func links(t *testing.T, ns *netnstest.NS) string {
	t.Helper()
	out, err := ns.Exec("ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	return strings.Join(names, " ")
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
