package vswitch

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"softnet.dev/internal/netnstest"
)

// The QEMU test's guest is Debian's cloud kernel with an initramfs the
// test builds: a static busybox, the kernel's virtio modules and ethtool
// (with the libraries it loads), and an init script that configures eth0
// and then runs the commands the test writes to the serial console.

// guestAddr and hostAddr are the guest's eth0 and the TAP namespace's
// addresses, on one /24.
const (
	guestAddr = "198.18.28.2"
	hostAddr  = "198.18.28.1"
)

// guestModules are the modules the guest loads (with what they depend
// on, first): the virtio PCI transport and virtio-net.
var guestModules = []string{"virtio_pci", "virtio_net"}

// guestKernel finds a kernel of Debian's linux-image-cloud-amd64 whose
// modules are installed (of several, the last in name order), or skips
// the test (fails it in CI) naming the package.
func guestKernel(t *testing.T) (vmlinuz, modules string) {
	t.Helper()
	found, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
	sort.Sort(sort.Reverse(sort.StringSlice(found)))
	for _, k := range found {
		dir := filepath.Join("/lib/modules", strings.TrimPrefix(filepath.Base(k), "vmlinuz-"))
		if _, err := os.Stat(filepath.Join(dir, "modules.dep")); err == nil {
			return k, dir
		}
	}
	netnstest.SkipOrFail(t, "needs a guest kernel, /boot/vmlinuz-*-cloud-amd64 with its modules (Debian package linux-image-cloud-amd64)")
	return "", ""
}

// staticBusybox returns the path of a statically linked busybox, the only
// kind that runs without a C library, or skips the test naming its
// package.
func staticBusybox(t *testing.T) string {
	t.Helper()
	netnstest.RequireTools(t, "busybox")
	path, _ := exec.LookPath("busybox")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("busybox %s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			netnstest.SkipOrFail(t, "needs a static busybox, and "+path+" is dynamically linked (Debian package busybox-static)")
		}
	}
	return path
}

// moduleOrder returns the files, under dir, of the modules names and of
// every module they depend on, each after its dependencies (modules.dep
// lists them; a module built into the kernel is not there and needs no
// loading).
func moduleOrder(dir string, names []string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{} // module file → the files it needs
	byName := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		mod, need, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(need)
		byName[strings.TrimSuffix(filepath.Base(mod), ".ko")] = mod
	}
	builtin, _ := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	var order []string
	seen := map[string]bool{}
	var visit func(mod string, depth int) error
	visit = func(mod string, depth int) error {
		if seen[mod] {
			return nil
		}
		if depth > len(deps) {
			return fmt.Errorf("modules.dep: a dependency loop through %s", mod)
		}
		seen[mod] = true
		for _, d := range deps[mod] {
			if err := visit(d, depth+1); err != nil {
				return err
			}
		}
		order = append(order, filepath.Join(dir, mod))
		return nil
	}
	for _, name := range names {
		mod, ok := byName[name]
		if !ok {
			if strings.Contains(string(builtin), "/"+name+".ko\n") {
				continue
			}
			return nil, fmt.Errorf("%s: no module %s, built in or not", dir, name)
		}
		if err := visit(mod, 0); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// libDirs are where the dynamic loader of a Debian amd64 system finds
// libraries; the guest's loader looks in the first.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// elfClosure returns the program's interpreter (the dynamic loader) and
// the files of every library it loads, directly or not.
func elfClosure(prog string) (interp string, libs map[string]string, err error) {
	libs = map[string]string{} // soname → file
	var walk func(path string) error
	walk = func(path string) error {
		f, err := elf.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP && interp == "" {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err != nil {
					return fmt.Errorf("%s: interpreter: %w", path, err)
				}
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, so := range needed {
			if _, ok := libs[so]; ok {
				continue
			}
			i := slices.IndexFunc(libDirs, func(d string) bool {
				_, err := os.Stat(filepath.Join(d, so))
				return err == nil
			})
			if i < 0 {
				return fmt.Errorf("%s needs %s, found in none of %v", path, so, libDirs)
			}
			libs[so] = filepath.Join(libDirs[i], so)
			if err := walk(libs[so]); err != nil {
				return err
			}
		}
		return nil
	}
	err = walk(prog)
	return interp, libs, err
}

// guestInit is the guest's /init. It loads the modules, configures eth0,
// prints @@READY and then runs each line "ID COMMAND" that comes on the
// console, printing its output and "@@DONE ID STATUS". Anything that
// goes wrong before is printed as @@FAIL, which the test looks for.
const guestInit = `#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin LD_LIBRARY_PATH=/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
dmesg -n 1
for m in /mods/*.ko; do
	insmod "$m" || echo "@@FAIL insmod $m"
done
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 300 ]; do usleep 100000; i=$((i+1)); done
[ -e /sys/class/net/eth0 ] || echo "@@FAIL no eth0"
ip link set lo up
ip link set eth0 up
ip addr add ` + guestAddr + `/24 dev eth0 || echo "@@FAIL ip addr"
stty -echo 2>/dev/null
echo "@@READY $(uname -r) eth0 $(cat /sys/class/net/eth0/address) mtu $(cat /sys/class/net/eth0/mtu), $(ls /sys/class/net/eth0/queues | tr '\n' ' ')"
while read -r id cmd; do
	eval "$cmd" >/tmp/out 2>&1
	rc=$?
	cat /tmp/out
	echo "@@DONE $id $rc"
done
`

// buildInitramfs writes the guest's initramfs into dir and returns its
// path.
func buildInitramfs(t *testing.T, dir, modDir string) string {
	t.Helper()
	busybox := staticBusybox(t)
	netnstest.RequireTools(t, "ethtool")
	ethtool, _ := exec.LookPath("ethtool")
	mods, err := moduleOrder(modDir, guestModules)
	if err != nil {
		t.Fatal(err)
	}
	interp, libs, err := elfClosure(ethtool)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "initramfs.cpio")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w := &cpioWriter{w: bufio.NewWriter(out)}
	dirs := []string{"bin", "sbin", "dev", "proc", "sys", "tmp", "mods", "lib", "lib/x86_64-linux-gnu"}
	if d := filepath.Dir(interp)[1:]; !slices.Contains(dirs, d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		w.dir(d)
	}
	w.node("dev/console", 0o020600, 5, 1)
	w.file("init", 0o755, []byte(guestInit))
	w.copy(t, "bin/busybox", busybox, 0o755)
	w.symlink("bin/sh", "busybox")
	w.copy(t, "sbin/ethtool", ethtool, 0o755)
	w.copy(t, interp[1:], interp, 0o755)
	for so, file := range libs {
		w.copy(t, "lib/x86_64-linux-gnu/"+so, file, 0o755)
	}
	for i, m := range mods {
		w.copy(t, fmt.Sprintf("mods/%02d-%s", i, filepath.Base(m)), m, 0o644)
	}
	if err := w.close(); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	if err := out.Close(); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	return path
}

// cpioWriter writes a cpio archive in the "newc" format, the one the
// kernel unpacks as an initramfs: per entry a header of ASCII hex
// fields, the name and the data, each padded to 4 bytes.
type cpioWriter struct {
	w   *bufio.Writer
	n   int64 // bytes written, for the padding
	ino int
	err error
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
		c.n += int64(len(b))
	}
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one entry: mode holds the file type bits.
func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	c.ino++
	c.write(fmt.Appendf(nil, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) dir(name string) { c.entry(name, 0o040755, 0, 0, nil) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, 0o100000|perm, 0, 0, data)
}

func (c *cpioWriter) symlink(name, target string) {
	c.entry(name, 0o120777, 0, 0, []byte(target))
}

func (c *cpioWriter) node(name string, mode uint32, major, minor int) {
	c.entry(name, mode, major, minor, nil)
}

// copy adds the file at src (links followed) as name.
func (c *cpioWriter) copy(t *testing.T, name, src string, perm uint32) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	c.file(name, perm, b)
}

func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
