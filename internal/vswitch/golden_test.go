package vswitch

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The golden files pin the switch's text forms, as users and other
// programs write and read them: --port specs and what they parse to
// (the string the switch prints and the device it opens), configuration
// files and their errors, and the statistics the API serves. Every case
// of testdata/golden/*.txt is an input and what it gives; go test -run
// Golden -golden.update writes them again from what the code does now.
var updateGolden = flag.Bool("golden.update", false, "write the golden files from what the code gives now")

// goldenCase is one input of a golden file and its lines of results.
type goldenCase struct {
	in  string
	out []string
}

// readGolden reads a golden file: each case is an input line followed
// by its result lines, each indented by a tab; '#' lines are comments.
func readGolden(t *testing.T, name string) []goldenCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "\t"):
			if len(cases) == 0 {
				t.Fatalf("%s: result line before any input: %q", name, line)
			}
			c := &cases[len(cases)-1]
			c.out = append(c.out, line[1:])
		default:
			cases = append(cases, goldenCase{in: line})
		}
	}
	return cases
}

// checkGolden compares what each case gives now (results) with the
// file, or writes the file with -golden.update, keeping its comments.
func checkGolden(t *testing.T, name string, results func(in string) []string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			switch {
			case strings.HasPrefix(line, "\t"):
			case line == "" || strings.HasPrefix(line, "#"):
				out.WriteString(line + "\n")
			default:
				out.WriteString(line + "\n")
				for _, r := range results(unescape(line)) {
					out.WriteString("\t" + r + "\n")
				}
			}
		}
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, c := range readGolden(t, name) {
		got := results(unescape(c.in))
		if strings.Join(got, "\n") != strings.Join(c.out, "\n") {
			t.Errorf("%s: %s\ngot:\n\t%s\nwant:\n\t%s", name, c.in, strings.Join(got, "\n\t"), strings.Join(c.out, "\n\t"))
		}
	}
}

// unescape turns a golden input's \n into newlines (configuration files
// of several lines) and \t into tabs.
func unescape(s string) string {
	return strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(s)
}

// TestGoldenPorts: each --port spec parses to the port it parsed to
// before (the string it prints, which parses back to itself, and the
// device or socket it opens with one and with two workers), or is
// refused with the same message.
func TestGoldenPorts(t *testing.T) {
	checkGolden(t, "ports.txt", func(in string) []string {
		p, err := ParsePort(in)
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		out := []string{"= " + p.String()}
		if again, err := ParsePort(p.String()); err != nil || again.String() != p.String() {
			out = append(out, fmt.Sprintf("does not round-trip: %s, %v", again, err))
		}
		for _, workers := range []int{1, 2} {
			out = append(out, fmt.Sprintf("opens with %d: %s", workers, openConfigOf(p, workers)))
		}
		return out
	})
}

// TestGoldenConfigs: configuration files parse and validate as before,
// their errors naming the file's line, and Text writes them back.
func TestGoldenConfigs(t *testing.T) {
	checkGolden(t, "configs.txt", func(in string) []string {
		cfg, err := ParseConfig("sw.conf", strings.NewReader(in))
		if err != nil {
			return strings.Split("error: "+err.Error(), "\n")
		}
		if err := cfg.Validate(); err != nil {
			return strings.Split("invalid: "+err.Error(), "\n")
		}
		return strings.Split(strings.TrimSuffix(cfg.Text(), "\n"), "\n")
	})
}

// TestGoldenReport: the statistics' JSON (GET /v1/stats, --stats-json)
// reads and writes back unchanged, with every kind's own counters, and
// the report the switch prints from it (softnet ctl stats, the exit
// report) is unchanged.
func TestGoldenReport(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "golden", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(in, &rep); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(&rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(out, '\n'), in) {
		t.Errorf("report.json read and written again:\n%s", out)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	textPath := filepath.Join("testdata", "golden", "report.txt")
	if *updateGolden {
		if err := os.WriteFile(textPath, text.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(textPath)
	if err != nil {
		t.Fatal(err)
	}
	if text.String() != string(want) {
		t.Errorf("report text:\n%s\nwant:\n%s", text.String(), want)
	}
}

// No error of the golden files speaks the Go parser's words (a
// function the user never called, netip.ParsePrefix("...")) or names a
// device that is not there ("tun : no device name").
func TestGoldenErrorsSpeakTheUsersTerms(t *testing.T) {
	for _, name := range []string{"ports.txt", "configs.txt"} {
		for _, c := range readGolden(t, name) {
			for _, out := range c.out {
				for _, leak := range []string{"netip.", "ParseAddr", "ParsePrefix", "tun :", "invalid IP"} {
					if strings.Contains(out, leak) {
						t.Errorf("%s: %q gives %q, which says %q", name, c.in, out, leak)
					}
				}
			}
		}
	}
}
