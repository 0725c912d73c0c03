package tun

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// inNetNS runs f in the named network namespace, or in the current one if
// name is "". Namespaces are per thread, so f runs on a goroutine of its
// own, locked to its OS thread; the thread is switched back afterwards and
// only then unlocked. If switching back fails the thread stays locked, and
// the runtime destroys it when the goroutine ends rather than let other
// goroutines run in the wrong namespace.
func inNetNS(name string, f func() error) error {
	if name == "" {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- runLocked(name, f)
	}()
	return <-errc
}

func runLocked(name string, f func() error) error {
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread() // a failed setns leaves the thread as it was
		return fmt.Errorf("enter network namespace %s: %w", name, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("leave network namespace %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}
