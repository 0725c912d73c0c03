package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	code = exitCodeTo(&errb, err)
	return out.String(), errb.String(), code
}

func TestBenchJSONLines(t *testing.T) {
	out, _, code := run(t, "bench", "--json", "--quiet", "--duration", "20ms", "--reps", "1", "flush", "alloc")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	results := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var obj map[string]any
		if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if _, isGoal := obj["goal"]; isGoal {
			continue
		}
		for _, k := range []string{"experiment", "variant", "metric", "value", "unit"} {
			if _, ok := obj[k]; !ok {
				t.Fatalf("line %q lacks %q", sc.Text(), k)
			}
		}
		if v, _ := obj["value"].(float64); !(v > 0) {
			t.Fatalf("non-positive value in %q", sc.Text())
		}
		results[obj["experiment"].(string)]++
	}
	if results["flush"] != 4 || results["alloc"] != 5 {
		t.Fatalf("results per experiment: %v", results)
	}
}

func TestBenchTable(t *testing.T) {
	out, _, code := run(t, "bench", "--quiet", "--duration", "20ms", "--reps", "1", "flush")
	if code != exitOK || !strings.Contains(out, "swap-contended") || !strings.Contains(out, "goal swap <= 1.00x mutex") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "no-such-experiment"},
		{"bench", "--duration", "0s"},
		{"bench", "--no-such-flag"},
	} {
		if _, _, code := run(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestHelp(t *testing.T) {
	out, _, code := run(t, "bench", "--help")
	if code != exitOK || !strings.Contains(out, "remote-free") || !strings.Contains(out, "--duration") {
		t.Fatalf("exit %d, help:\n%s", code, out)
	}
}
