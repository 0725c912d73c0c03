// Package buildinfo says which softnet a binary is: its module version
// and the VCS revision the Go toolchain stamped into it
// (runtime/debug.ReadBuildInfo). It is the one source of `softnet
// version`, `softnet --version`, the API's GET /v1/version, the
// softnet_build_info metric and softnet-cni's VERSION.
package buildinfo

import (
	"runtime/debug"
	"strings"
	"sync"
)

// Module is softnet's module path.
const Module = "softnet.dev"

// Devel is the version the toolchain gives a module built from its own
// checkout without a version of its own (`go build` with VCS stamping
// off, `go run`, tests).
const Devel = "(devel)"

// Info is which softnet a binary is.
type Info struct {
	Module string `json:"module"`
	// Version is the module's: a release (v1.2.0), a pseudo-version the
	// toolchain derives from the checkout's commit (v0.0.0-2026...-abcdef,
	// with "+dirty" for a modified tree), or "(devel)".
	Version string `json:"version"`
	// Revision, Time and Modified are the checkout's commit, its commit
	// time and whether the tree had uncommitted changes, as `go build`
	// stamps them from git (vcs.revision, vcs.time, vcs.modified); empty
	// for a build without VCS stamping (-buildvcs=false, outside a
	// checkout, go run) or a dependency's module.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Go is the toolchain that built the binary.
	Go string `json:"go"`
}

// Get returns the running binary's Info.
var Get = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
})

// From returns the Info of bi; ok false (no build info: a binary built
// without module support) gives an Info that says so.
func From(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{Module: Module, Version: "unknown", Go: "unknown"}
	}
	in := Info{Module: Module, Version: Devel, Go: bi.GoVersion}
	switch {
	case bi.Main.Path == Module:
		in.Version = bi.Main.Version
		// The settings are the main module's: only then are they softnet's.
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.time":
				in.Time = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	default:
		// softnet's packages in another program: the version its go.mod
		// requires.
		for _, d := range bi.Deps {
			if d.Path == Module {
				in.Version = d.Version
				if d.Replace != nil && d.Replace.Version != "" {
					in.Version = d.Replace.Version
				}
			}
		}
	}
	if in.Version == "" {
		in.Version = Devel
	}
	return in
}

// String is the Info in one line, as `softnet --version` prints it:
// "softnet.dev v1.2.0 (go1.26.8)", or for a build from a checkout
// "softnet.dev (devel) revision 0123abcd... 2026-12-02T12:00:00Z modified
// (go1.26.8)"; a build that has neither a version nor a revision says so.
func (in Info) String() string {
	var b strings.Builder
	b.WriteString(in.Module + " " + in.Version)
	if in.Revision != "" {
		b.WriteString(" revision " + in.Revision)
		if in.Time != "" {
			b.WriteString(" " + in.Time)
		}
		if in.Modified {
			b.WriteString(" modified")
		}
	} else if in.Version == Devel {
		b.WriteString(" without a VCS revision (built with -buildvcs=false, outside a git checkout, or by go run or go test)")
	}
	b.WriteString(" (" + in.Go + ")")
	return b.String()
}
