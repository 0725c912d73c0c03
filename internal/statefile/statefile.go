// Package statefile keeps a small file that must survive a crash whole,
// such as the state of `softnet switch --state`. Save writes a new file
// beside the old one, syncs it to disk, renames it over the old one and
// syncs the directory: a reader finds the old contents or the new one,
// never a mixture, and once Save returns the new contents survive a
// power loss. A lock (flock(2) on FILE.lock, which records the holder's
// pid) keeps two processes from sharing one file; the kernel releases it
// when its holder dies, however it dies.
package statefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked is the error of Open when another process holds the file.
var ErrLocked = errors.New("in use by another process")

// File is a state file, locked by this process.
type File struct {
	path string
	lock *os.File
}

// Open locks the state file at path, creating its directory (mode 0755)
// if it is missing; the file itself need not exist.
func Open(path string) (*File, error) {
	if path == "" {
		return nil, errors.New("state file: no path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state file %s: lock: %w", path, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lock.Name())
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state file %s: %w (pid %s, in %s)", path, ErrLocked, strings.TrimSpace(string(holder)), path+".lock")
		}
		return nil, fmt.Errorf("state file %s: lock: %w", path, err)
	}
	// The holder's pid, for the error of the next one: best effort.
	if err := lock.Truncate(0); err == nil {
		_, _ = lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &File{path: path, lock: lock}, nil
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Load returns the file's contents, or nil and no error if there is no
// file yet.
func (f *File) Load() ([]byte, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err // os.ReadFile's error names the file
}

// Save replaces the file's contents with b, durably: when Save returns
// nil, b is on disk, and a crash at any point leaves the old contents
// or b.
func (f *File) Save(b []byte) error {
	tmp := f.path + ".new"
	if err := writeSynced(tmp, b); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("state file %s: %w", f.path, err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("state file %s: %w", f.path, err)
	}
	// The rename is in the directory: until the directory is synced,
	// a crash may bring back the old name's contents.
	if err := syncDir(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("state file %s: sync directory: %w", f.path, err)
	}
	return nil
}

func writeSynced(name string, b []byte) error {
	w, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	if err == nil {
		err = w.Sync()
	}
	return errors.Join(err, w.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// MoveAside renames the file to FILE.bad-TIME (UTC), so that the next
// Save starts a new one and the bad one stays for a look, and returns
// the new name.
func (f *File) MoveAside() (string, error) {
	aside := f.path + ".bad-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(f.path, aside); err != nil {
		return "", fmt.Errorf("state file %s: move aside: %w", f.path, err)
	}
	if err := syncDir(filepath.Dir(f.path)); err != nil {
		return aside, fmt.Errorf("state file %s: sync directory: %w", f.path, err)
	}
	return aside, nil
}

// Close releases the lock; the file stays.
func (f *File) Close() error { return f.lock.Close() }
