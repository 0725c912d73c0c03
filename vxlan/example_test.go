package vxlan_test

import (
	"fmt"
	"net/netip"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
	"softnet.dev/vxlan"
)

// A VXLAN port bridged with a local port: frames from the local side
// reach the remote VTEP over UDP, and the remote's come back. Open needs
// CAP_NET_RAW for its sending socket, so this example is not run.
func Example() {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	vx, err := vxlan.Open(vxlan.Config{
		Name:    "vx0",
		VNI:     42,
		Local:   netip.MustParseAddrPort("198.18.100.1:4789"),
		Remotes: []netip.Addr{netip.MustParseAddr("198.18.100.2")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	local, peer, _ := memport.NewPair("local", "peer", memport.PairConfig{Layer: packet.L2})
	defer peer.CloseInto(nil)
	bridge := program.NewBridge(program.BridgeConfig{})
	eng, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{bridge}}, local, vx)
	if err != nil {
		fmt.Println(err)
		return
	}
	eng.Start()
	defer eng.Close() // closes vx and local
	fmt.Println("guests need an MTU of", vx.MTU())
}

// The VXLAN header on the wire: what PutHeader writes, Decode takes
// apart and validates for the VNI it serves.
func ExampleDecode() {
	frame := make([]byte, packet.EthernetHeaderLen)
	packet.PutEthernet(frame, packet.Broadcast, [6]byte{2, 0, 0, 0, 0, 1}, packet.EtherTypeARP)
	datagram := make([]byte, vxlan.HeaderLen+len(frame))
	vxlan.PutHeader(datagram, 42)
	copy(datagram[vxlan.HeaderLen:], frame)
	fmt.Printf("header % x\n", datagram[:vxlan.HeaderLen])

	inner, ok, _ := vxlan.Decode(datagram, 42)
	fmt.Println("VNI 42:", ok, len(inner), "bytes of frame")
	_, ok, reason := vxlan.Decode(datagram, 7)
	fmt.Println("VNI 7:", ok, reason)
	// Output:
	// header 08 00 00 00 00 00 2a 00
	// VNI 42: true 14 bytes of frame
	// VNI 7: false VXLAN_VNI_NOT_FOUND
}
