package vhostuser

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"unicode"
)

// Config describes a vhost-user port.
type Config struct {
	Name string // the port's name, for logs and stats
	// Socket is the path of the Unix socket the port listens on (server
	// mode: the front-end, QEMU or DPDK's virtio-user, connects). Listen
	// replaces a stale socket file there and Close removes it. In client
	// mode it is the front-end's socket.
	Socket string
	// Client connects to a socket the front-end listens on (QEMU's
	// -chardev socket,server=on; virtio-user's server=1) instead, and
	// connects again each time the front-end goes away and comes back:
	// the VM, not the switch, outlives the other.
	Client bool
	// Perm is who may connect to the socket in server mode (nil: the
	// process's user alone). The socket appears at its path already
	// owned and with its mode (package internal/unixsock), so that a
	// front-end never finds it with a mode it cannot connect through.
	Perm *SocketPerm
	// Queues is the number of queue pairs, 1 by default. More than one
	// offers multiqueue (VHOST_USER_PROTOCOL_F_MQ).
	Queues int
	// Offload offers the checksum and TCP segmentation offloads
	// (VIRTIO_NET_F_CSUM, GUEST_CSUM, HOST_TSO4/6, GUEST_TSO4/6): a guest
	// that takes them exchanges partial checksums and 64 KiB TCP packets.
	Offload bool
	Log     *slog.Logger // nil: slog.Default()
}

// SocketPerm is the owner, group and mode of a port's socket. A
// front-end must be able to write the socket to connect: QEMU run by
// libvirt as its own user (libvirt-qemu, qemu) needs the socket to be
// that user's, or its group's with mode 0660.
type SocketPerm struct {
	UID, GID int // -1: the process's
	// Mode is the permission bits: 0 is 0660 with a group, else 0600.
	// Others (0o002) may not write: anyone could connect as the VM.
	Mode fs.FileMode
}

// String is p as the switch logs it: "owner 64055 group -1 mode 0600".
func (p *SocketPerm) String() string {
	if p == nil {
		return "the process's user's, mode 0600"
	}
	return fmt.Sprintf("owner %d group %d mode %#o", p.UID, p.GID, uint32(p.mode()))
}

// mode is p's mode, with its default.
func (p SocketPerm) mode() fs.FileMode {
	switch {
	case p.Mode != 0:
		return p.Mode
	case p.GID >= 0:
		return 0o660
	}
	return 0o600
}

// MaxQueues bounds Config.Queues: the ring index of SET_VRING_KICK has
// eight bits, two rings per pair.
const MaxQueues = 128

// maxSocketPath is what struct sockaddr_un holds, less the NUL.
const maxSocketPath = 107

// maxName bounds a port's name, as long as a Linux interface's could be
// many times over.
const maxName = 64

// plain reports whether s can stand in a port spec (options are split
// at commas) and a configuration file line (fields at spaces, comments
// from #).
func plain(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == ',' || r == '#' {
			return false
		}
	}
	return true
}

// Validate checks cfg without touching anything.
func (cfg Config) Validate() error {
	switch {
	case cfg.Name == "":
		return errors.New("vhost-user: empty name")
	case len(cfg.Name) > maxName || strings.ContainsAny(cfg.Name, "=/:") || !plain(cfg.Name):
		return fmt.Errorf("vhost-user %q: a name has up to %d bytes and no spaces, control characters or any of ,=/:#", cfg.Name, maxName)
	case cfg.Socket == "":
		return fmt.Errorf("vhost-user %s: no socket path", cfg.Name)
	case !plain(cfg.Socket):
		return fmt.Errorf("vhost-user %s: socket path %q: no spaces, control characters, commas or #, which port specs and configuration files cannot carry", cfg.Name, cfg.Socket)
	case len(cfg.Socket) > maxSocketPath:
		return fmt.Errorf("vhost-user %s: socket path of %d bytes, at most %d", cfg.Name, len(cfg.Socket), maxSocketPath)
	case cfg.Perm != nil && cfg.Client:
		return fmt.Errorf("vhost-user %s: a socket's owner, group and mode are the front-end's in client mode", cfg.Name)
	case cfg.Perm != nil && cfg.Perm.Mode&^fs.ModePerm != 0:
		return fmt.Errorf("vhost-user %s: socket mode %v: permission bits only (0 to 0777)", cfg.Name, cfg.Perm.Mode)
	case cfg.Perm != nil && cfg.Perm.Mode&0o002 != 0:
		return fmt.Errorf("vhost-user %s: socket mode %#o lets anyone connect as the VM's front-end: give the front-end's user or group instead", cfg.Name, uint32(cfg.Perm.Mode))
	case cfg.Perm != nil && (cfg.Perm.UID < -1 || cfg.Perm.GID < -1):
		return fmt.Errorf("vhost-user %s: socket owner %d, group %d: want an ID, or -1", cfg.Name, cfg.Perm.UID, cfg.Perm.GID)
	case cfg.Queues < 0 || cfg.Queues > MaxQueues:
		return fmt.Errorf("vhost-user %s: %d queues, want 1 to %d", cfg.Name, cfg.Queues, MaxQueues)
	}
	return nil
}
