package control

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultSocket is where `softnet switch` serves its API unless told
// otherwise, and where `softnet ctl` looks for it.
const DefaultSocket = "/run/softnet/softnet.sock"

// socketMode lets the owner and its group control the switch: anyone who
// can write the socket can reconfigure it, so it is never world-writable.
const socketMode = 0o660

// ErrInUse means another process serves the socket's path.
var ErrInUse = errors.New("in use by another running switch")

// Listen creates the Unix socket at path, with mode 0660, and its
// directory if missing. A socket file left by a switch that died is
// replaced; one that a running process answers on is not (ErrInUse).
func Listen(path string) (*net.UnixListener, error) {
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
	if err := os.Chmod(path, socketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// Closing the listener removes the file.
	ln.SetUnlinkOnClose(true)
	return ln, nil
}
