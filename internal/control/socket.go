package control

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	"softnet.dev/internal/unixsock"
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
// on is not (ErrInUse). Closing the listener removes the socket.
func Listen(path string, gid int) (*unixsock.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln, err := unixsock.Listen(path, unixsock.Perm{UID: -1, GID: gid, Mode: socketMode})
	if errors.Is(err, unixsock.ErrInUse) {
		err = ErrInUse
	}
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return ln, nil
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
