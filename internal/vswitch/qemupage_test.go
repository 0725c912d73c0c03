package vswitch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"softnet.dev/internal/docblock"
)

// qemuPage is the user's page whose command lines TestVhostUserQEMU
// runs, so that the page and a real QEMU cannot disagree.
const qemuPage = "../../docs/qemu.md"

// pageCommands are the command lines of one of the page's tested
// blocks: a fenced block after "<!-- qemu-test: NAME -->".
type pageCommands struct {
	workers int      // softnet's --workers, 1 without
	socket  string   // the vhost-user port's socket=
	opts    string   // the port's other options, ",k=v..."
	qemu    []string // QEMU's arguments, without the program's name
	queues  int      // the netdev's queues=, 1 without
}

// readPageBlock returns the lines of the page's block named name (after
// <!-- qemu-test: NAME -->), each command's continuation lines (ending
// in \) joined.
func readPageBlock(path, name string) ([]string, error) {
	raw, err := docblock.Read(path, "qemu-test: "+name)
	if err != nil {
		return nil, err
	}
	var lines []string
	cur := ""
	for _, l := range raw {
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur += s + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	if cur != "" {
		return nil, fmt.Errorf("%s: block %s ends in a continued line", path, name)
	}
	return lines, nil
}

// parsePage reads the block named name: a `softnet switch` line with a
// vhost-user port, and a qemu-system-x86_64 line whose arguments are
// those the test knows how to run on its machine (qemuPageArgs).
func parsePage(path, name string) (pageCommands, error) {
	lines, err := readPageBlock(path, name)
	if err != nil {
		return pageCommands{}, err
	}
	pc := pageCommands{workers: 1, queues: 1}
	var sawSwitch bool
	for _, l := range lines {
		if strings.ContainsAny(l, `'"$`) {
			return pc, fmt.Errorf("block %s: %q: the test splits lines at spaces, so no quotes or variables", name, l)
		}
		args := strings.Fields(l)
		switch {
		case len(args) >= 2 && args[0] == "softnet" && args[1] == "switch":
			sawSwitch = true
			for i := 2; i+1 < len(args); i += 2 {
				switch flag, v := args[i], args[i+1]; {
				case flag == "--workers":
					if pc.workers, err = strconv.Atoi(v); err != nil {
						return pc, fmt.Errorf("block %s: --workers %q", name, v)
					}
				case flag == "--port" && strings.HasPrefix(v, "vhost-user:"):
					fields := strings.Split(v, ",")
					for _, f := range fields[1:] {
						if s, ok := strings.CutPrefix(f, "socket="); ok {
							pc.socket = s
						} else {
							pc.opts += "," + f
						}
					}
				case flag == "--port":
				default:
					return pc, fmt.Errorf("block %s: softnet switch %s: the test does not run it", name, flag)
				}
			}
		case len(args) >= 1 && args[0] == "qemu-system-x86_64":
			pc.qemu = args[1:]
		case len(args) == 0:
		default:
			return pc, fmt.Errorf("block %s: %q is neither softnet switch nor qemu-system-x86_64", name, l)
		}
	}
	if !sawSwitch || pc.socket == "" || pc.qemu == nil {
		return pc, fmt.Errorf("block %s: want a softnet switch line with a vhost-user port and a qemu-system-x86_64 line", name)
	}
	for i := 0; i < len(pc.qemu); i += 2 {
		if i+1 == len(pc.qemu) {
			return pc, fmt.Errorf("block %s: QEMU's %s has no value", name, pc.qemu[i])
		}
		if flag, v := pc.qemu[i], pc.qemu[i+1]; flag == "-netdev" {
			for _, o := range strings.Split(v, ",")[1:] {
				if q, ok := strings.CutPrefix(o, "queues="); ok {
					if pc.queues, err = strconv.Atoi(q); err != nil {
						return pc, fmt.Errorf("block %s: -netdev queues=%q", name, q)
					}
				}
			}
		}
	}
	return pc, nil
}

// qemuVersion is a QEMU's major and minor version, as it compares.
type qemuVersion struct{ major, minor int }

func (v qemuVersion) before(major, minor int) bool {
	return v.major < major || v.major == major && v.minor < minor
}

// qemuPageArgs is the page's QEMU line as the test runs it on this
// machine, each change the one the page lists: the socket at sock, TCG
// for KVM, 256 MiB and one vCPU, no MSI-X vectors (QEMU 7.2 under TCG),
// reconnect=SECONDS before QEMU 9.2, the kernel and initramfs for the
// disk, the console on standard input and output; and device, further
// options of the virtio-net device. It checks on the way that the page
// gives vectors=2N+2 for N queue pairs, and its path is the port's.
func (pc pageCommands) qemuPageArgs(sock, kernel, initrd, device string, v qemuVersion) ([]string, error) {
	var out []string
	var sawTCG, sawChardev, sawDevice bool
	for i := 0; i+1 < len(pc.qemu); i += 2 {
		flag, val := pc.qemu[i], pc.qemu[i+1]
		opts := strings.Split(val, ",")
		switch flag {
		case "-machine":
			for j, o := range opts {
				if o == "accel=kvm" {
					opts[j], sawTCG = "accel=tcg", true
				}
			}
		case "-m":
			opts = []string{"256M"}
		case "-smp":
			opts = []string{"1"}
		case "-object":
			for j, o := range opts {
				if strings.HasPrefix(o, "size=") {
					opts[j] = "size=256M"
				}
			}
		case "-chardev":
			for j, o := range opts {
				if p, ok := strings.CutPrefix(o, "path="); ok {
					if p != pc.socket {
						return nil, fmt.Errorf("chardev path %s, but the port's socket is %s", p, pc.socket)
					}
					opts[j], sawChardev = "path="+sock, true
				}
				if ms, ok := strings.CutPrefix(o, "reconnect-ms="); ok && v.before(9, 2) {
					n, err := strconv.Atoi(ms)
					if err != nil {
						return nil, fmt.Errorf("reconnect-ms=%q", ms)
					}
					opts[j] = "reconnect=" + strconv.Itoa(max(1, (n+999)/1000))
				}
			}
		case "-netdev":
		case "-device":
			if opts[0] != "virtio-net-pci" {
				return nil, fmt.Errorf("-device %s: the test runs only virtio-net-pci", opts[0])
			}
			sawDevice = true
			mq := slices.Contains(opts, "mq=on")
			if mq != (pc.queues > 1) {
				return nil, fmt.Errorf("-device %s with queues=%d on the netdev: want mq=on exactly with more than one", val, pc.queues)
			}
			i := slices.IndexFunc(opts, func(o string) bool { return strings.HasPrefix(o, "vectors=") })
			if mq && (i < 0 || opts[i] != "vectors="+strconv.Itoa(2*pc.queues+2)) {
				return nil, fmt.Errorf("-device %s: want vectors=%d (2N+2) for %d queue pairs", val, 2*pc.queues+2, pc.queues)
			}
			if i >= 0 {
				opts = slices.Delete(opts, i, i+1)
			}
			opts = append(opts, "vectors=0")
			if device != "" {
				opts = append(opts, strings.Split(strings.TrimPrefix(device, ","), ",")...)
			}
		case "-drive":
			continue // the guest's disk: the test boots a kernel instead
		default:
			return nil, fmt.Errorf("QEMU's %s: the test does not know how to run it", flag)
		}
		out = append(out, flag, strings.Join(opts, ","))
	}
	if !sawTCG || !sawChardev || !sawDevice {
		return nil, fmt.Errorf("QEMU's line %q: want -machine with accel=kvm, -chardev with path= and -device virtio-net-pci", pc.qemu)
	}
	if !slices.Contains(out, "-smp") {
		out = append(out, "-smp", "1")
	}
	return append(out,
		"-kernel", kernel, "-initrd", initrd, "-append", "console=ttyS0 quiet",
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-serial", "stdio",
	), nil
}

// The page's tested blocks parse, and become command lines the test
// can run, on any QEMU version: checked without QEMU or root, so that a
// change to the page fails here first.
func TestQEMUPage(t *testing.T) {
	for _, name := range []string{"server", "client"} {
		pc, err := parsePage(qemuPage, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []qemuVersion{{7, 2}, {9, 2}, {10, 2}} {
			args, err := pc.qemuPageArgs("/tmp/x.sock", "k", "i", "", v)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			line := strings.Join(args, " ")
			if !strings.Contains(line, "path=/tmp/x.sock") || strings.Contains(line, "accel=kvm") {
				t.Errorf("%s on %v: %s", name, v, line)
			}
			if old := strings.Contains(line, "reconnect="); name == "server" && old != v.before(9, 2) {
				t.Errorf("%s on QEMU %v: %s: want reconnect= before 9.2, reconnect-ms= from it", name, v, line)
			}
		}
	}
	if _, err := readPageBlock(qemuPage, "no-such-block"); err == nil {
		t.Error("a block that is not there was found")
	}
}
