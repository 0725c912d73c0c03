package netnstest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

func TestUniqueName(t *testing.T) {
	a, b := uniqueName("TestSome/Sub_Test-Name"), uniqueName("TestSome/Sub_Test-Name")
	if a == b {
		t.Fatalf("two names are equal: %s", a)
	}
	if !strings.HasPrefix(a, "softnet-somesubtes-") {
		t.Errorf("name %q does not say which test it is", a)
	}
	if len(a) > 40 {
		t.Errorf("name %q is long", a)
	}
}

func TestNewExecDo(t *testing.T) {
	var name string
	t.Run("ns", func(t *testing.T) {
		ns := New(t)
		name = ns.Name
		list, err := exec.Command("ip", "netns", "list").CombinedOutput()
		if err != nil || !strings.Contains(string(list), name) {
			t.Fatalf("ip netns list (%v) lacks %s: %s", err, name, list)
		}
		out, err := ns.Exec("ip", "-o", "link", "show", "lo")
		if err != nil || !strings.Contains(out, "UP") {
			t.Errorf("lo in %s is not up (%v): %s", name, err, out)
		}

		here, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer here.Close()
		var inside netns.NsHandle
		err = ns.Do(func() error {
			cur, err := netns.Get()
			if err != nil {
				return err
			}
			inside = cur
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer inside.Close()
		if inside.Equal(here) {
			t.Error("Do ran in the test's own namespace")
		}
		want, err := netns.GetFromName(name)
		if err != nil {
			t.Fatal(err)
		}
		defer want.Close()
		if !inside.Equal(want) {
			t.Errorf("Do ran in %v, want %s", inside, name)
		}

		sentinel := errors.New("sentinel")
		if err := ns.Do(func() error { return sentinel }); !errors.Is(err, sentinel) {
			t.Errorf("Do returned %v, want f's error", err)
		}
		if err := ns.Do(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Errorf("Do after a panic returned %v", err)
		}
		if _, err := ns.Exec("false"); err == nil {
			t.Error("Exec of a failing command returned no error")
		}
	})
	if name == "" {
		return // skipped
	}
	if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists after cleanup (%v)", name, err)
	}
}

func TestDoMissingNamespace(t *testing.T) {
	RequireRoot(t)
	if err := Do("softnet-no-such-namespace", func() error { return nil }); err == nil {
		t.Error("Do in a missing namespace returned no error")
	}
}
