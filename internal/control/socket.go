package control

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSocket is where `softnet switch` serves its API unless told
// otherwise, and where `softnet ctl` looks for it.
const DefaultSocket = "/run/softnet/softnet.sock"

// socketMode lets the owner and its group control the switch: anyone who
// can write the socket can reconfigure it, so it is never world-writable.
const socketMode = 0o660

// ErrInUse means another process serves the socket's path.
var ErrInUse = errors.New("in use by another running switch")

// Listen creates the Unix socket at path, with mode 0660 and group gid
// (-1: the process's), and its directory if missing. A socket file left
// by a switch that died is replaced; one that a running process answers
// on is not (ErrInUse).
func Listen(path string, gid int) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket %s: exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: %w", path, ErrInUse)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("control socket %s: checking for another switch: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket %s: remove stale socket: %w", path, err)
		}
	}
	// The mode is set before anyone can connect: bind creates the file
	// with the umask's permissions.
	old := syscall.Umask(0o777 &^ socketMode)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// The group before the mode that lets it in; until then only the
	// process's group could connect.
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("control socket %s: group %d: %w", path, gid, err)
		}
	}
	if err := os.Chmod(path, socketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// Closing the listener removes the file.
	ln.SetUnlinkOnClose(true)
	return ln, nil
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

// Peer is the process at the other end of a control connection, as the
// kernel recorded it when the process connected (SO_PEERCRED).
type Peer struct {
	UID, GID uint32
	PID      int32
}

// peerOf reads the credentials of c's peer.
func peerOf(c net.Conn) (Peer, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return Peer{}, fmt.Errorf("peer credentials: %T is not a socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err = errors.Join(cerr, err); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// By is the peer as the log names who made a change: by.uid, by.gid,
// by.pid.
func (p Peer) By() slog.Attr {
	return slog.Group("by", "uid", p.UID, "gid", p.GID, "pid", p.PID)
}
