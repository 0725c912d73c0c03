package netnstest

import (
	"fmt"

	"softnet.dev/internal/netns"
)

// Do runs f on an OS thread switched into the namespace and returns its
// error. Sockets and devices f opens stay bound to the namespace after it
// returns. See the package-level Do.
func (n *NS) Do(f func() error) error { return Do(n.Name, f) }

// Do runs f on a locked OS thread switched into the named network
// namespace, then switches the thread back (internal/netns.Do).
func Do(name string, f func() error) error {
	if err := netns.Do(name, f); err != nil {
		return fmt.Errorf("netnstest: %w", err)
	}
	return nil
}
