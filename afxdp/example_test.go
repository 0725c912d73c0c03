package afxdp_test

import (
	"context"
	"errors"
	"log"

	"softnet.dev/afxdp"
	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/port"
	"softnet.dev/program"
)

// A learning bridge between the host ends of two veth pairs, whose other
// ends are the eth0 of two pods. It needs root and the veths;
// TestExampleBridge runs it.
func Example() {
	if err := bridge(context.Background(), "", "veth-pod1", "veth-pod2"); err != nil {
		log.Fatal(err)
	}
}

// bridge runs an engine between AF_XDP ports on the interfaces devs, in
// the namespace ns, until ctx ends. The engine's pool is the ports':
// their UMEM is its 2 KiB class, so that frames received on one port
// leave by the other without a copy.
func bridge(ctx context.Context, ns string, devs ...string) error {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		return err
	}
	var ports []port.Port
	for _, dev := range devs {
		p, err := afxdp.Open(afxdp.Config{Name: dev, NetNS: ns, Pool: pool})
		if err != nil {
			for _, p := range ports {
				p.CloseInto(nil)
			}
			return errors.Join(err, pool.Close())
		}
		ports = append(ports, p)
	}
	e, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{program.NewBridge(program.BridgeConfig{})}}, ports...)
	if err != nil {
		for _, p := range ports {
			p.CloseInto(nil)
		}
		return errors.Join(err, pool.Close())
	}
	if err := e.Start(); err != nil {
		return errors.Join(err, e.Close(), pool.Close())
	}
	<-ctx.Done()
	// Close stops the workers, closes the ports (their programs detach)
	// and the pool's Close checks that every buffer came home.
	return errors.Join(e.Close(), pool.Close())
}
