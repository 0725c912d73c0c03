package vhostuser_test

import (
	"fmt"
	"os"
	"path/filepath"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
	"softnet.dev/vhostuser"
)

// A vhost-user port bridged with a local port. The port listens on its
// socket at once; a VM connects to it whenever it starts (QEMU's
// -chardev socket,path=...,reconnect-ms=1000 with -netdev vhost-user;
// docs/qemu.md), and
// again after it reboots.
func Example() {
	dir, _ := os.MkdirTemp("", "vhost-example")
	defer os.RemoveAll(dir)
	pool, _ := buffer.NewPool(buffer.Config{})
	vm, err := vhostuser.Listen(vhostuser.Config{Name: "vm1", Socket: filepath.Join(dir, "vm1.sock"), Offload: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	local, peer, _ := memport.NewPair("local", "peer", memport.PairConfig{Layer: packet.L2})
	bridge := program.NewBridge(program.BridgeConfig{})
	eng, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{bridge}}, local, vm)
	if err != nil {
		fmt.Println(err)
		return
	}
	eng.Start()
	fmt.Println(vm.Info().Name, "connected:", vm.Connected())

	eng.Stop()
	fmt.Println("close:", eng.Close(), peer.CloseInto(nil)) // the engine closes vm and local
	fmt.Println("leak check:", pool.Close())
	// Output:
	// vm1 connected: false
	// close: <nil> <nil>
	// leak check: <nil>
}
