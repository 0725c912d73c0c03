package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"softnet.dev/internal/vswitch"
)

// switchSettings returns a switch command whose flags the command line
// args set, and the file settings of those flags.
func switchSettings(t *testing.T, args ...string) (*cobra.Command, *fileSettings) {
	t.Helper()
	cmd := newSwitchCmd()
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return cmd, newFileSettings(cmd.Flags())
}

func writeConf(t *testing.T, text string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "softnet.conf")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func flagValue(cmd *cobra.Command, name string) string {
	return cmd.Flags().Lookup(name).Value.String()
}

// The file takes every flag of softnet switch but --config, by its
// name; the command line wins; a reload takes the same settings and
// refuses changed or removed ones.
func TestConfigFileSettings(t *testing.T) {
	cmd, s := switchSettings(t, "--busy-poll", "0s", "--log-level", "warn", "--port", "tun:b")
	names := s.names()
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if in := strings.Contains(" "+strings.Join(names, " ")+" ", " "+f.Name+" "); in == (f.Name == "config" || f.Name == "help" || f.Name == "port" || f.Name == "route" || f.Name == "service" || f.Name == "filter" || f.Name == "workers" || f.Name == "state-reset") {
			t.Errorf("flag --%s: a setting of the file %v", f.Name, in)
		}
	})
	file := writeConf(t, "busy-poll 50us\ncpus 0\nlog-level debug\nmetrics 127.0.0.1:9477 # a comment\ncontrol \"\"\nworkers 1\nport tun:a\n")
	cfg, err := loadConfig(file, switchFlags{ports: []string{"tun:b"}}, s.settings())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"busy-poll": "0s", "log-level": "warn", "cpus": "0", "metrics": "127.0.0.1:9477", "control": ""} {
		if got := flagValue(cmd, name); got != want {
			t.Errorf("--%s %q, want %q", name, got, want)
		}
	}
	if len(cfg.Ports) != 2 || cfg.Ports[0].Name != "a" || cfg.Ports[1].Name != "b" || cfg.Workers != 1 {
		t.Errorf("config %+v", cfg)
	}

	s.started = true
	if _, err := loadConfig(file, switchFlags{}, s.settings()); err != nil || s.removed(file) != nil {
		t.Errorf("a reload of the same file: %v, %v", err, s.removed(file))
	}
	changed := writeConf(t, "busy-poll 50us\ncpus 1\nlog-level debug\nmetrics 127.0.0.1:9477\ncontrol \"\"\n")
	if _, err := loadConfig(changed, switchFlags{}, s.settings()); err == nil || !strings.Contains(err.Error(), changed+":2: cpus \"1\": the switch runs with \"0\"; a setting changes with a restart") {
		t.Errorf("a reload that changes cpus: %v", err)
	}
	gone := writeConf(t, "busy-poll 50us\ncpus 0\nlog-level debug\ncontrol \"\"\n")
	if _, err := loadConfig(gone, switchFlags{}, s.settings()); err != nil {
		t.Fatal(err)
	}
	if err := s.removed(gone); err == nil || !strings.Contains(err.Error(), "metrics is gone from the file") {
		t.Errorf("a reload without metrics: %v", err)
	}

	// Bad settings: each with its file and line.
	for text, want := range map[string]string{
		"busy-poll fast\n":    ":1: busy-poll \"fast\": ",
		"\ncpus\n":            ":2: want one value after \"cpus\" (as --cpus takes it), got 0",
		"log-level a b\n":     ":1: want one value after \"log-level\"",
		"cpus 1\ncpus 2\n":    ":2: cpus given twice",
		"config other.conf\n": ":1: unknown directive \"config\" (port, route, service, filter, workers, busy-poll, control, control-group",
		"no-such-flag 1\n":    ":1: unknown directive \"no-such-flag\"",
		"help 1\n":            ":1: unknown directive \"help\"",
	} {
		_, s := switchSettings(t)
		f := writeConf(t, text)
		if _, err := loadConfig(f, switchFlags{}, s.settings()); err == nil || !strings.Contains(err.Error(), f+want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

// contrib/softnet.conf is a configuration the switch reads: every line
// parses with the switch's own parser, its settings set their flags.
func TestContribConfig(t *testing.T) {
	cmd, s := switchSettings(t)
	file := filepath.Join("..", "..", "contrib", "softnet.conf")
	cfg, err := loadConfig(file, switchFlags{}, s.settings())
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Ports) < 2 || len(cfg.Routes) < 2 || cfg.Workers != 2 {
		t.Errorf("contrib/softnet.conf: %d ports, %d routes, %d workers", len(cfg.Ports), len(cfg.Routes), cfg.Workers)
	}
	if got := flagValue(cmd, "busy-poll"); got != (200*time.Microsecond).String() || flagValue(cmd, "metrics") == "" || flagValue(cmd, "cpus") == "" {
		t.Errorf("contrib/softnet.conf's settings: busy-poll %s, metrics %q, cpus %q", got, flagValue(cmd, "metrics"), flagValue(cmd, "cpus"))
	}
	if _, err := vswitch.ParseCPUs(flagValue(cmd, "cpus")); err != nil {
		t.Error(err)
	}
}

// contrib/softnet.service runs softnet switch with flags it has, the
// configuration file where its comment says to install contrib's.
func TestContribUnit(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "contrib", "softnet.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var exec []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			exec = strings.Fields(v)
		}
	}
	if len(exec) < 2 || filepath.Base(exec[0]) != "softnet" || exec[1] != "switch" {
		t.Fatalf("ExecStart %q: want softnet switch", exec)
	}
	cmd := newSwitchCmd()
	if err := cmd.ParseFlags(exec[2:]); err != nil {
		t.Fatalf("ExecStart %q: %v", exec, err)
	}
	if len(cmd.Flags().Args()) != 0 {
		t.Errorf("ExecStart %q: arguments %q", exec, cmd.Flags().Args())
	}
	if got := flagValue(cmd, "config"); got != "/etc/softnet/softnet.conf" {
		t.Errorf("ExecStart's --config %q", got)
	}
}
