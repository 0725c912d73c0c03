//go:build linux

package vhostuser

import (
	"encoding/binary"
	"fmt"
)

// Requests a front-end sends (vhost-user.rst, "Front-end message types").
const (
	reqGetFeatures         = 1
	reqSetFeatures         = 2
	reqSetOwner            = 3
	reqResetOwner          = 4
	reqSetMemTable         = 5
	reqSetLogBase          = 6
	reqSetLogFD            = 7
	reqSetVringNum         = 8
	reqSetVringAddr        = 9
	reqSetVringBase        = 10
	reqGetVringBase        = 11
	reqSetVringKick        = 12
	reqSetVringCall        = 13
	reqSetVringErr         = 14
	reqGetProtocolFeatures = 15
	reqSetProtocolFeatures = 16
	reqGetQueueNum         = 17
	reqSetVringEnable      = 18
	reqSendRARP            = 19
)

var requestNames = map[uint32]string{
	reqGetFeatures: "GET_FEATURES", reqSetFeatures: "SET_FEATURES",
	reqSetOwner: "SET_OWNER", reqResetOwner: "RESET_OWNER",
	reqSetMemTable: "SET_MEM_TABLE", reqSetLogBase: "SET_LOG_BASE",
	reqSetLogFD: "SET_LOG_FD", reqSetVringNum: "SET_VRING_NUM",
	reqSetVringAddr: "SET_VRING_ADDR", reqSetVringBase: "SET_VRING_BASE",
	reqGetVringBase: "GET_VRING_BASE", reqSetVringKick: "SET_VRING_KICK",
	reqSetVringCall: "SET_VRING_CALL", reqSetVringErr: "SET_VRING_ERR",
	reqGetProtocolFeatures: "GET_PROTOCOL_FEATURES", reqSetProtocolFeatures: "SET_PROTOCOL_FEATURES",
	reqGetQueueNum: "GET_QUEUE_NUM", reqSetVringEnable: "SET_VRING_ENABLE",
	reqSendRARP: "SEND_RARP",
}

func requestName(r uint32) string {
	if n, ok := requestNames[r]; ok {
		return n
	}
	return fmt.Sprintf("request %d", r)
}

// Header flags.
const (
	flagVersionMask = 0x3
	version         = 0x1
	flagReply       = 1 << 2
	flagNeedReply   = 1 << 3
)

// Virtio and vhost-user feature bits this back-end knows.
const (
	featCsum          = 1 << 0  // VIRTIO_NET_F_CSUM: the guest sends partial checksums
	featGuestCsum     = 1 << 1  // VIRTIO_NET_F_GUEST_CSUM: the guest takes them
	featGuestTSO4     = 1 << 7  // VIRTIO_NET_F_GUEST_TSO4
	featGuestTSO6     = 1 << 8  // VIRTIO_NET_F_GUEST_TSO6
	featHostTSO4      = 1 << 11 // VIRTIO_NET_F_HOST_TSO4
	featHostTSO6      = 1 << 12 // VIRTIO_NET_F_HOST_TSO6
	featMrgRxbuf      = 1 << 15 // VIRTIO_NET_F_MRG_RXBUF
	featMQ            = 1 << 22 // VIRTIO_NET_F_MQ
	featEventIdx      = 1 << 29 // VIRTIO_RING_F_EVENT_IDX
	featProtocol      = 1 << 30 // VHOST_USER_F_PROTOCOL_FEATURES
	featVersion1      = 1 << 32 // VIRTIO_F_VERSION_1
	featInOrder       = 1 << 35 // VIRTIO_F_IN_ORDER: buffers are used in the order they were made available
	protoMQ           = 1 << 0  // VHOST_USER_PROTOCOL_F_MQ
	protoReplyAck     = 1 << 3  // VHOST_USER_PROTOCOL_F_REPLY_ACK
	offloadFeatures   = featCsum | featGuestCsum | featGuestTSO4 | featGuestTSO6 | featHostTSO4 | featHostTSO6
	baseFeatures      = featMrgRxbuf | featEventIdx | featProtocol | featVersion1 | featInOrder
	baseProtocolFeats = protoReplyAck
)

// Limits of the messages this back-end takes.
const (
	headerLen = 12
	// maxPayload bounds a message's body: the largest this back-end
	// reads (a memory table of maxRegions) is 264 bytes; the spec's
	// largest (device configuration, inflight descriptions) fit 4 KiB.
	maxPayload = 4096
	maxRegions = 8  // VHOST_MEMORY_BASELINE_NREGIONS
	maxFDs     = 8  // file descriptors one message may carry
	regionLen  = 32 // struct vhost_user_memory_region
	// vringIndexMask and vringNoFD split the u64 of SET_VRING_KICK,
	// CALL and ERR: the ring's index and "no file descriptor" (polling).
	vringIndexMask = 0xff
	vringNoFD      = 1 << 8
)

// msgHeader is a message's header, in the spec's little-endian layout.
type msgHeader struct {
	Request uint32
	Flags   uint32
	Size    uint32
}

// parseHeader decodes and checks a header: the version must be 1, and
// the payload bounded.
func parseHeader(b []byte) (msgHeader, error) {
	if len(b) < headerLen {
		return msgHeader{}, fmt.Errorf("header: %d bytes, want %d", len(b), headerLen)
	}
	h := msgHeader{
		Request: binary.LittleEndian.Uint32(b[0:]),
		Flags:   binary.LittleEndian.Uint32(b[4:]),
		Size:    binary.LittleEndian.Uint32(b[8:]),
	}
	if h.Flags&flagVersionMask != version {
		return h, fmt.Errorf("%s: version %d, want %d", requestName(h.Request), h.Flags&flagVersionMask, version)
	}
	if h.Size > maxPayload {
		return h, fmt.Errorf("%s: payload of %d bytes, at most %d", requestName(h.Request), h.Size, maxPayload)
	}
	return h, nil
}

// vringState is struct vhost_vring_state: a ring's index and a number
// (its size, its base, or enable).
type vringState struct{ Index, Num uint32 }

// vringAddr is struct vhost_vring_addr: a ring's parts, as addresses in
// the front-end's own address space.
type vringAddr struct {
	Index, Flags            uint32
	Desc, Used, Avail, Logd uint64
}

// memRegion is struct vhost_user_memory_region.
type memRegion struct {
	GuestAddr, Size, UserAddr, MmapOffset uint64
}

// message is a decoded request: which fields are meaningful depends on
// the request.
type message struct {
	msgHeader
	U64     uint64
	State   vringState
	Addr    vringAddr
	Regions []memRegion
}

// parsePayload decodes the payload of a request whose layout this
// back-end knows, checking its size; other requests keep their raw
// header only. It never panics on any input (FuzzMessage).
func parsePayload(h msgHeader, p []byte) (message, error) {
	m := message{msgHeader: h}
	name := requestName(h.Request)
	need := func(n int) error {
		if len(p) < n {
			return fmt.Errorf("%s: payload of %d bytes, want %d", name, len(p), n)
		}
		return nil
	}
	switch h.Request {
	case reqSetFeatures, reqSetProtocolFeatures, reqSetVringKick, reqSetVringCall, reqSetVringErr:
		if err := need(8); err != nil {
			return m, err
		}
		m.U64 = binary.LittleEndian.Uint64(p)
	case reqSetVringNum, reqSetVringBase, reqGetVringBase, reqSetVringEnable:
		if err := need(8); err != nil {
			return m, err
		}
		m.State = vringState{binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint32(p[4:])}
	case reqSetVringAddr:
		if err := need(40); err != nil {
			return m, err
		}
		m.Addr = vringAddr{
			Index: binary.LittleEndian.Uint32(p), Flags: binary.LittleEndian.Uint32(p[4:]),
			Desc: binary.LittleEndian.Uint64(p[8:]), Used: binary.LittleEndian.Uint64(p[16:]),
			Avail: binary.LittleEndian.Uint64(p[24:]), Logd: binary.LittleEndian.Uint64(p[32:]),
		}
	case reqSetMemTable:
		if err := need(8); err != nil {
			return m, err
		}
		n := binary.LittleEndian.Uint32(p)
		if n == 0 || n > maxRegions {
			return m, fmt.Errorf("%s: %d regions, want 1 to %d", name, n, maxRegions)
		}
		if err := need(8 + int(n)*regionLen); err != nil {
			return m, err
		}
		m.Regions = make([]memRegion, n)
		for i := range m.Regions {
			r := p[8+i*regionLen:]
			m.Regions[i] = memRegion{
				GuestAddr: binary.LittleEndian.Uint64(r), Size: binary.LittleEndian.Uint64(r[8:]),
				UserAddr: binary.LittleEndian.Uint64(r[16:]), MmapOffset: binary.LittleEndian.Uint64(r[24:]),
			}
			if err := m.Regions[i].check(); err != nil {
				return m, fmt.Errorf("%s: region %d: %w", name, i, err)
			}
		}
	}
	return m, nil
}

// check refuses a region whose ranges wrap around the address space or
// that is empty: translating into it could then overflow.
func (r memRegion) check() error {
	const maxUint64 = ^uint64(0)
	switch {
	case r.Size == 0:
		return fmt.Errorf("size 0")
	case r.GuestAddr > maxUint64-r.Size, r.UserAddr > maxUint64-r.Size, r.MmapOffset > maxUint64-r.Size:
		return fmt.Errorf("guest %#x, user %#x or offset %#x + size %#x wraps", r.GuestAddr, r.UserAddr, r.MmapOffset, r.Size)
	}
	return nil
}

// appendReply encodes a reply to h with payload p.
func appendReply(dst []byte, h msgHeader, p []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, h.Request)
	dst = binary.LittleEndian.AppendUint32(dst, version|flagReply)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p)))
	return append(dst, p...)
}

func u64Payload(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func statePayload(s vringState) []byte {
	b := binary.LittleEndian.AppendUint32(nil, s.Index)
	return binary.LittleEndian.AppendUint32(b, s.Num)
}
