package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/version"

	"softnet.dev/internal/buildinfo"
)

// VERSION says which softnet the plugin is, and runtimes still read the
// spec versions from it as they read any plugin's.
func TestVersionSaysWhichSoftnet(t *testing.T) {
	var out bytes.Buffer
	if err := supported.Encode(&out); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Softnet buildinfo.Info `json:"softnet"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.Softnet != buildinfo.Get() {
		t.Errorf("VERSION %s: softnet %+v, want %+v (%v)", out.Bytes(), got.Softnet, buildinfo.Get(), err)
	}
	pi, err := (&version.PluginDecoder{}).Decode(out.Bytes())
	if err != nil || !slices.Equal(pi.SupportedVersions(), []string{"0.4.0", "1.0.0", "1.1.0"}) {
		t.Errorf("the runtime's decoder: %v, %v", pi, err)
	}
}
