package afxdp

import (
	"strings"
	"testing"

	"softnet.dev/buffer"
)

func TestValidate(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ok := Config{Name: "h1", Pool: pool}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Pool: pool}, "name"},
		{Config{Name: "a,b", Pool: pool}, "name"},
		{Config{Name: "p", Dev: "much-too-long-for-a-dev", Pool: pool}, "interface"},
		{Config{Name: "p", Dev: "a/b", Pool: pool}, "interface"},
		{Config{Name: "h1"}, "pool"},
		{Config{Name: "h1", Pool: pool, Queues: -1}, "queues"},
		{Config{Name: "h1", Pool: pool, Queues: 1000}, "queues"},
		{Config{Name: "h1", Pool: pool, Mode: 7}, "mode"},
		{Config{Name: "h1", Pool: pool, ZeroCopy: 9}, "zero-copy"},
		{Config{Name: "h1", Pool: pool, FrameSize: 10}, "frame size"},
		{Config{Name: "h1", Pool: pool, RxRing: 100}, "rx ring"},
		{Config{Name: "h1", Pool: pool, FillRing: 1 << 20}, "fill ring"},
		{Config{Name: "h1", Pool: pool, TxRing: 1024, CompletionRing: 512}, "completion ring"},
		{Config{Name: "h1", Pool: pool, NetNS: "../x"}, "namespace"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error about %s", c.cfg, err, c.want)
		}
	}
}
