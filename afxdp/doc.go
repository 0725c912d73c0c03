// Package afxdp makes an existing Linux interface, the host end of a
// pod's veth pair or a NIC, a softnet port through AF_XDP sockets: an
// XDP program on the interface redirects its frames to one socket per
// queue, and the sockets' UMEM, the memory frames land in, is a class of
// the workers' buffer pool, so a received frame is already a buffer.
//
//	p, err := afxdp.Open(afxdp.Config{Name: "veth1a2b", Pool: pool})
//	if err != nil {
//		return err // a foreign XDP program on the interface is refused
//	}
//	eng, err := engine.New(engine.Config{Pool: pool, Programs: programs}, p, other)
//
// The worker lends frames to each queue's fill ring in bulk, within a
// budget per worker, and takes back what the kernel sent from the
// completion ring; a queue whose fill ring runs dry counts NOMEM and
// recovers as frames come home. No system call is made to receive, and
// one per round (at most) to transmit, only when the kernel asks for it
// (XDP_RING_NEED_WAKEUP). The program is attached through a bpf_link, so
// it goes with the port, or with the process if it dies. AF_XDP frames
// carry no offload metadata: received frames whose checksum a peer left
// partial are finished (see Config.TrustCsum), GSO packets are segmented
// before they are sent. Frames longer than a UMEM frame arrive in pieces
// (multi-buffer XDP) and are joined. Example shows a bridge of two veths.
//
// Design: docs/design.md, "AF_XDP ports".
package afxdp
