package netns

import (
	"path"
	"strings"
)

// Valid reports whether name can name a namespace for Do: empty (the
// current one), a name as `ip netns` takes it, or a clean absolute path.
func Valid(name string) bool {
	switch {
	case strings.ContainsRune(name, 0):
		return false
	case strings.HasPrefix(name, "/"):
		return path.Clean(name) == name && name != "/"
	}
	return !strings.Contains(name, "/") && name != "." && name != ".."
}

// ValidDevName reports whether name is a device name the kernel takes
// (its dev_valid_name): 1 to 15 bytes, not "." or "..", without '/',
// ':' or blanks.
func ValidDevName(name string) bool {
	return name != "" && len(name) <= 15 && name != "." && name != ".." && !strings.ContainsAny(name, "/: \t\n\x00")
}
