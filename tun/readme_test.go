package tun_test

import (
	"os"
	"strings"
	"testing"
)

// The README's "Embed the pool and a TUN port" snippet is the Example's
// bridge, character for character, so that what users copy compiles and
// is tested.
func TestREADMEShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fn := string(src[strings.Index(string(src), "func bridge("):])
	if !strings.Contains(string(readme), "```go\n"+fn+"```\n") {
		t.Error("README.md does not show example_test.go's bridge as it is")
	}
}
