package netnstest

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs f on an OS thread switched into the namespace and returns its
// error. Sockets and devices f opens stay bound to the namespace after it
// returns. See the package-level Do.
func (n *NS) Do(f func() error) error { return Do(n.Name, f) }

// Do runs f on a locked OS thread switched into the named network
// namespace, then switches the thread back.
//
// f runs on a goroutine of its own, so the caller's thread is never
// switched. If switching back fails, the thread stays locked: when its
// goroutine ends the runtime destroys it instead of handing a thread in
// the wrong namespace to other goroutines. A panic in f is returned as an
// error, after the thread is back.
func Do(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- doLocked(name, f)
	}()
	return <-errc
}

// doLocked runs on a locked thread and unlocks it only once the thread is
// back in its original namespace.
func doLocked(name string, f func() error) error {
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netnstest: current namespace: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netnstest: namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		// A failed setns leaves the thread where it was.
		runtime.UnlockOSThread()
		return fmt.Errorf("netnstest: enter %s: %w", name, err)
	}
	ferr := call(f)
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("netnstest: leave %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

func call(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("netnstest: panic in namespace: %v", r)
		}
	}()
	return f()
}
