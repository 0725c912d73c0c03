package port

import (
	"errors"
	"fmt"
	"strings"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// Offloads are the segmentation and checksum offloads a port accepts and
// produces (virtio-net semantics, as TUNSETOFFLOAD sets them).
type Offloads uint32

const (
	OffloadCsum   Offloads = 1 << iota // checksum-partial packets
	OffloadTSO4                        // TCP over IPv4 GSO
	OffloadTSO6                        // TCP over IPv6 GSO
	OffloadTSOECN                      // TSO with ECN
	OffloadUSO4                        // UDP over IPv4 GSO
	OffloadUSO6                        // UDP over IPv6 GSO
)

var offloadNames = []string{"csum", "tso4", "tso6", "tso_ecn", "uso4", "uso6"}

func (o Offloads) String() string {
	var names []string
	for i, n := range offloadNames {
		if o&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// Info describes a port.
type Info struct {
	Name     string
	Layer    packet.Layer // L2 (Ethernet frames, TAP) or L3 (IP packets, TUN)
	Queues   int          // number of RX and TX queues
	MaxFrame int          // largest packet, in bytes, the port produces or accepts
	Offloads Offloads
}

func (i Info) String() string {
	layer := "L3"
	if i.Layer == packet.L2 {
		layer = "L2"
	}
	return fmt.Sprintf("%s (%s, %d queues, max frame %d, offloads %s)", i.Name, layer, i.Queues, i.MaxFrame, i.Offloads)
}

// Port is a device with Info().Queues receive and transmit queues. RxQueue
// returns nil for a port that only transmits (a sink), TxQueue nil for one
// that only receives (a generator).
type Port interface {
	Info() Info
	RxQueue(i int) RxQueue
	TxQueue(i int) TxQueue
	// CloseInto releases the port: the engine's close, once the workers
	// that used it have let it go. Buffers still queued inside it are
	// dropped with drop.QueuePurge into c, which the caller owns; a port
	// says whether c may be nil. A port used without an engine may offer
	// a plain Close, as tun.Device does.
	CloseInto(c *buffer.Cache) error
}

// RxQueue is one receive queue, polled by exactly one worker.
type RxQueue interface {
	// Receive fills a prefix of bufs with received packets, taking the
	// buffers from c, and returns how many. It does not block. A packet the
	// queue had to discard (malformed device header, no buffer) is dropped
	// into c with its reason. An error means the queue (usually the whole
	// port) is no longer usable: ErrDown, or a device error.
	Receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error)
	Waiter
}

// TxQueue is one transmit queue, used by exactly one worker.
type TxQueue interface {
	// Transmit takes ownership of every buffer of bufs: each is sent, and
	// freed into c when the device is done with it (now or at a later
	// completion), or dropped into c with a reason (drop.FullRing, ...).
	// It returns the number sent. An error means the queue is no longer
	// usable; the buffers are still accounted for.
	Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error)
}

// Flusher is implemented by TxQueues that defer the costly part of
// sending to the end of the worker's round, as the kernel flushes XDP
// redirects once per NAPI poll (xdp_do_flush): Transmit queues the
// packets, and Flush sends what Transmit queued (an AF_XDP queue's
// wakeup system call). A worker calls Flush after each round in which it
// called Transmit, and after every later round while Flush reports that
// it held packets back; more says that the round found packets and the
// worker polls again at once, so that a queue may wait for a larger
// batch. With more false, Flush sends everything: a worker that found no
// packets is about to sleep. A program that transmits without an engine
// calls Flush(c, false) after its Transmit calls. An error means the
// queue is no longer usable, as Transmit's.
type Flusher interface {
	Flush(c *buffer.Cache, more bool) (held bool, err error)
}

// Waiter lets an idle worker sleep until a queue has work.
type Waiter interface {
	// FD returns a file descriptor that becomes readable when the queue
	// may have packets after Arm returned false, or -1 if the queue never
	// needs waiting for.
	FD() int
	// Arm asks the queue to make FD readable when packets arrive, and
	// reports whether packets are already pending (then the worker does
	// not sleep). The worker calls Disarm after it wakes.
	Arm() (pending bool)
	Disarm()
}

// ErrDown means the port's device went away, for good. A device that is
// merely set down is not an error: its queues drop with drop.DevReady
// until it is up again.
var ErrDown = errors.New("port: down")

// Notifier is implemented by RxQueues that share one FD with other
// queues of their worker (an io_uring that serves all of a worker's
// queues), so that a worker polls only the queues that have packets, as
// the kernel's NAPI polls only devices on its poll list. When the FD is
// readable, the worker polls one of the queues that share it; that queue
// and every later Receive or Arm of any of them calls the notify function
// of each queue it leaves packets (or an error) for, on the worker's
// goroutine. A queue whose FD is its own is polled when the FD is
// readable and needs no notification; it must then be level-triggered:
// readable while packets wait, armed or not.
type Notifier interface {
	SetNotify(notify func())
}
