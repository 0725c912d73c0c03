// Package unixsock creates the switch's listening Unix sockets (its
// control API, its vhost-user ports) with the owner, group and mode they
// are meant to have, and resolves the user and group names that options
// such as --control-group and socket-group= give.
//
// A socket's path appears already owned and with its final mode: the
// socket is bound in a private directory beside it, given its owner,
// group and mode there, and renamed into place. No client
// ever sees a mode it should not (a QEMU run as libvirt-qemu refused
// for an instant, or anyone let in before the group is set), which
// binding in place, then chown and chmod, would show for a moment.
package unixsock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrInUse means another process listens on the socket's path.
var ErrInUse = errors.New("in use by another running process")

// Perm is who may connect to a socket: its owner and group (-1: the
// process's) and its permission bits. Connecting takes write permission.
type Perm struct {
	UID, GID int
	Mode     fs.FileMode
}

// Listener is a listening socket whose Close also removes its path.
type Listener struct {
	*net.UnixListener
	path string
}

// Close stops listening and removes the socket's path.
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// Path is where the socket listens.
func (l *Listener) Path() string { return l.path }

// Listen listens on a new Unix socket at path with perm. A socket file
// there that no one answers on (left by a process that was killed) is
// replaced; one that answers is not (ErrInUse), nor is a file of another
// type. The directory must exist.
func Listen(path string, perm Perm) (*Listener, error) {
	if perm.Mode&^fs.ModePerm != 0 {
		return nil, fmt.Errorf("mode %v: only permission bits", perm.Mode)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s: exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, ErrInUse
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("checking for another listener: %w", err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	dirPath := filepath.Dir(path)
	dir, err := os.Open(dirPath)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	// The socket is bound in a directory of its own that only this
	// process's user may enter, so that no one connects before perm is
	// set, without the process-wide umask that other goroutines' files
	// would get too.
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	tmpName := ".softnet-" + hex.EncodeToString(rnd[:])
	if err := unix.Mkdirat(int(dir.Fd()), tmpName, 0o700); err != nil {
		return nil, err
	}
	defer unix.Unlinkat(int(dir.Fd()), tmpName, unix.AT_REMOVEDIR)
	tmp, err := os.Open(filepath.Join(dirPath, tmpName))
	if err != nil {
		return nil, err
	}
	defer tmp.Close()
	// Its descriptor keeps the bound path short: a sockaddr_un holds
	// 107 bytes, which path alone may nearly fill.
	via := fmt.Sprintf("/proc/self/fd/%d/s", tmp.Fd())
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: via, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The name it was bound by means another file once tmp is closed.
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*Listener, error) {
		ln.Close()
		_ = unix.Unlinkat(int(tmp.Fd()), "s", 0)
		return nil, err
	}
	if perm.UID >= 0 || perm.GID >= 0 {
		if err := unix.Fchownat(int(tmp.Fd()), "s", perm.UID, perm.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fail(fmt.Errorf("owner %d, group %d: %w", perm.UID, perm.GID, err))
		}
	}
	if err := unix.Fchmodat(int(tmp.Fd()), "s", uint32(perm.Mode), 0); err != nil {
		return fail(fmt.Errorf("mode %v: %w", perm.Mode, err))
	}
	// RENAME_NOREPLACE: a file that appeared at path since it was
	// checked stays, and this socket is refused.
	if err := unix.Renameat2(int(tmp.Fd()), "s", int(dir.Fd()), filepath.Base(path), unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = ErrInUse
		}
		return fail(err)
	}
	return &Listener{UnixListener: ln, path: path}, nil
}

// LookupUser returns the ID of the user named name, which may also be a
// numeric ID.
func LookupUser(name string) (int, error) {
	u, err := user.Lookup(name)
	if errors.As(err, new(user.UnknownUserError)) {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		if errors.As(err, new(user.UnknownUserError)) || errors.As(err, new(user.UnknownUserIdError)) {
			return -1, fmt.Errorf("user %q: no such user", name)
		}
		return -1, fmt.Errorf("user %q: %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return -1, fmt.Errorf("user %q: ID %q: %w", name, u.Uid, err)
	}
	return uid, nil
}

// LookupGroup returns the ID of the group named name, which may also be
// a numeric ID.
func LookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if errors.As(err, new(user.UnknownGroupError)) {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			g, err = user.LookupGroupId(name)
		}
	}
	if err != nil {
		if errors.As(err, new(user.UnknownGroupError)) || errors.As(err, new(user.UnknownGroupIdError)) {
			return -1, fmt.Errorf("group %q: no such group", name)
		}
		return -1, fmt.Errorf("group %q: %w", name, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("group %q: ID %q: %w", name, g.Gid, err)
	}
	return gid, nil
}
