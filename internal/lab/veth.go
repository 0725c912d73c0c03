package lab

import "softnet.dev/buffer"

// vethPath is the kernel's own path: a veth pair, nothing in process.
type vethPath struct{ p *guestPair }

// openVeth creates a veth pair with one end in each guest.
func openVeth(p *guestPair) (*vethPath, error) {
	err := ip("-n", p.a.ns, "link", "add", p.a.dev, "type", "veth", "peer", "name", p.b.dev, "netns", p.b.ns)
	if err != nil {
		return nil, err
	}
	return &vethPath{p}, nil
}

func (v *vethPath) counters() (forwarded, bool)   { return forwarded{}, false }
func (v *vethPath) buffers() (buffer.Stats, bool) { return buffer.Stats{}, false }
func (v *vethPath) workerThreads() []int          { return nil }
func (v *vethPath) poolBytes() int64              { return 0 }

// close deletes the pair (deleting one end deletes both).
func (v *vethPath) close() (string, error) {
	return "", ip("-n", v.p.a.ns, "link", "del", v.p.a.dev)
}
