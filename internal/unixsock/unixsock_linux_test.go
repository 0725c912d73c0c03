package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/internal/netnstest"
)

// The socket appears at its path with its owner, group and mode, and
// leaves nothing else in the directory; Close removes it.
func TestListenPerm(t *testing.T) {
	netnstest.RequireRoot(t) // giving a file to another user needs CAP_CHOWN
	dir := t.TempDir()
	path := filepath.Join(dir, "vm1.sock")
	ln, err := Listen(path, Perm{UID: 65534, GID: 65533, Mode: 0o640})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o640 || st.Uid != 65534 || st.Gid != 65533 {
		t.Errorf("socket %v owned by %d:%d, want a socket of mode 0640 owned by 65534:65533", fi.Mode(), st.Uid, st.Gid)
	}
	if names := dirNames(t, dir); len(names) != 1 || names[0] != "vm1.sock" {
		t.Errorf("directory holds %q, want only vm1.sock", names)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	c.Close()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("after Close the directory holds %q", names)
	}
}

// A user the mode leaves out cannot connect; the group it lets in can.
func TestListenModeKeepsOthersOut(t *testing.T) {
	netnstest.RequireRoot(t)
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} { // let the other users reach it
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "vm.sock")
	ln, err := Listen(path, Perm{UID: -1, GID: 65533, Mode: 0o660})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// A connect needs write permission on the socket: try as a user in
	// the group and as one who is not.
	for _, tc := range []struct {
		gid  int
		want bool
	}{{65533, true}, {65532, false}} {
		err := dialAs(t, path, 65534, tc.gid)
		if (err == nil) != tc.want || (err != nil && !errors.Is(err, unix.EACCES)) {
			t.Errorf("connect as 65534:%d: %v, want allowed %v", tc.gid, err, tc.want)
		}
	}
}

// dialAs connects to path as uid:gid (and no other group), from a
// thread of its own: Linux keeps credentials per thread, and a thread
// locked to a goroutine that ends is ended with it, credentials and all.
func dialAs(t *testing.T, path string, uid, gid int) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		groups := []uint32{uint32(gid)}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
			done <- fmt.Errorf("setgroups: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			done <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			done <- fmt.Errorf("setresuid: %w", e)
			return
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		done <- unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	}()
	return <-done
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// A live socket at the path is refused, a stale one replaced, and a file
// of another type left alone.
func TestListenReplacesOnlyStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen(path, Perm{UID: -1, GID: -1, Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, Perm{UID: -1, GID: -1, Mode: 0o600}); !errors.Is(err, ErrInUse) {
		t.Errorf("second listen: %v, want ErrInUse", err)
	}
	// A switch that was killed leaves its socket file: the listener
	// stops without removing it.
	ln.SetUnlinkOnClose(false)
	ln.UnixListener.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatal(err)
	}
	ln2, err := Listen(path, Perm{UID: -1, GID: -1, Mode: 0o600})
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln2.Close()
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, Perm{UID: -1, GID: -1, Mode: 0o600}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file: %v, want not a socket", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
		t.Errorf("the regular file was changed: %q, %v", b, err)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("directory holds %q, want only s.sock", names)
	}
}

// A path as long as a sockaddr_un holds still works: the socket is
// bound by a short name and renamed.
func TestListenLongPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, strings.Repeat("v", 107-len(dir)-1))
	ln, err := Listen(path, Perm{UID: -1, GID: -1, Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v, %v; want mode 0600", fi, err)
	}
}

func TestListenRefusesNonPermBits(t *testing.T) {
	if _, err := Listen(filepath.Join(t.TempDir(), "s"), Perm{UID: -1, GID: -1, Mode: os.ModeSetuid | 0o600}); err == nil {
		t.Error("setuid mode accepted")
	}
}

func TestLookup(t *testing.T) {
	own, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Skipf("the process's group %d has no name: %v", os.Getgid(), err)
	}
	for _, name := range []string{own.Name, own.Gid} {
		if gid, err := LookupGroup(name); err != nil || gid != os.Getgid() {
			t.Errorf("LookupGroup(%q) = %d, %v; want %d", name, gid, err, os.Getgid())
		}
	}
	for _, name := range []string{"softnet-no-such-group", "4294967290", ""} {
		if gid, err := LookupGroup(name); err == nil || !strings.Contains(err.Error(), "no such group") {
			t.Errorf("LookupGroup(%q) = %d, %v; want no such group", name, gid, err)
		}
	}
	me, err := user.LookupId(strconv.Itoa(os.Getuid()))
	if err != nil {
		t.Skipf("the process's user %d has no name: %v", os.Getuid(), err)
	}
	for _, name := range []string{me.Username, me.Uid} {
		if uid, err := LookupUser(name); err != nil || uid != os.Getuid() {
			t.Errorf("LookupUser(%q) = %d, %v; want %d", name, uid, err, os.Getuid())
		}
	}
	for _, name := range []string{"softnet-no-such-user", "4294967290", ""} {
		if uid, err := LookupUser(name); err == nil || !strings.Contains(err.Error(), "no such user") {
			t.Errorf("LookupUser(%q) = %d, %v; want no such user", name, uid, err)
		}
	}
}
