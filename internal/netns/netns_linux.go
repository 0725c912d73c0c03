// Package netns runs code inside a network namespace, named as `ip netns
// add` makes them (under /run/netns) or given by the path of a namespace
// file, as container runtimes hand them over (/proc/PID/ns/net,
// /var/run/netns/NAME). Namespaces belong to threads, so the
// code runs on a goroutine of its own locked to its OS thread; sockets and
// devices it opens stay bound to the namespace after it returns.
package netns

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// Do runs f in the network namespace name: a name under /run/netns, an
// absolute path of a namespace file, or "" for the current one. The thread is switched back afterwards and only then unlocked: if
// switching back fails it stays locked, and the runtime destroys it when
// its goroutine ends rather than let other goroutines run in the wrong
// namespace. A panic in f is returned as an error, after the thread is
// back.
func Do(name string, f func() error) error {
	if name == "" {
		return call(f)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- doLocked(name, f)
	}()
	return <-errc
}

func doLocked(name string, f func() error) error {
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	var target netns.NsHandle
	if strings.HasPrefix(name, "/") {
		target, err = netns.GetFromPath(name)
	} else {
		target, err = netns.GetFromName(name)
	}
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread() // a failed setns leaves the thread as it was
		return fmt.Errorf("enter network namespace %s: %w", name, err)
	}
	ferr := call(f)
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("leave network namespace %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

func call(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in network namespace code: %v", r)
		}
	}()
	return f()
}
