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
// ':', NUL or white space as the kernel's isspace knows it, which is
// byte-wise and Latin-1 (tab to carriage return, space, and 0xa0, so
// also any UTF-8 character whose encoding has that byte, such as "à").
func ValidDevName(name string) bool {
	if name == "" || len(name) > 15 || name == "." || name == ".." {
		return false
	}
	for i := range len(name) {
		switch c := name[i]; {
		case c == '/', c == ':', c == 0, c == ' ', c >= '\t' && c <= '\r', c == 0xa0:
			return false
		}
	}
	return true
}
