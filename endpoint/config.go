package endpoint

import (
	"errors"
	"fmt"
	"math/bits"

	"softnet.dev/buffer"
)

// Defaults used where a Config or Options field is zero.
const (
	DefaultName     = "local"
	DefaultRingSize = 256  // views in flight per endpoint and worker
	DefaultQuota    = 1024 // buffers an endpoint may hold, over all workers
	DefaultSendBufs = 64   // empty buffers stocked per endpoint for sending
)

// Errors. Returned errors wrap these with the endpoint and the buffer.
var (
	// ErrNotLent means a released or checked view is not held by the
	// endpoint: released already, lent to another endpoint, or forged.
	ErrNotLent = errors.New("endpoint: view not lent to this endpoint")
	// ErrClosed means the endpoint (or its table) was closed.
	ErrClosed = errors.New("endpoint: closed")
	// ErrInUse means another endpoint is bound to the flow.
	ErrInUse = errors.New("endpoint: flow already bound")
	// ErrNoBuffers means no send buffer was available in time.
	ErrNoBuffers = errors.New("endpoint: no send buffer available")
	// ErrTooBig means a payload does not fit a send buffer.
	ErrTooBig = errors.New("endpoint: payload too big")
)

// Config sets up a Table.
type Config struct {
	// Name is the table's port name (default DefaultName).
	Name string
	// Pool is the engine's pool; it sizes the per-buffer lending tables.
	Pool *buffer.Pool
	// Workers must equal the engine's worker count.
	Workers int
	// Consumer is the table's index in engine.Config.Consumers, which its
	// program puts into its Deliver verdicts.
	Consumer int
	// RingSize is the default capacity of each receive ring (rounded up
	// to a power of two).
	RingSize int
	// Quota is the default number of received buffers an endpoint may
	// hold (lent and not yet returned), split evenly over the workers.
	Quota int
	// SendBufs is the number of empty buffers kept ready for an endpoint
	// that sends (rounded up to a power of two).
	SendBufs int
	// SendClass is the size class of send buffers.
	SendClass buffer.Class
	// Debug records the call site of every release and poisons released
	// payloads; it is slow.
	Debug bool
}

// Options override the table's defaults for one endpoint.
type Options struct {
	RingSize int
	Quota    int
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.Quota == 0 {
		cfg.Quota = DefaultQuota
	}
	if cfg.SendBufs == 0 {
		cfg.SendBufs = DefaultSendBufs
	}
	switch {
	case cfg.Pool == nil:
		return cfg, errors.New("endpoint: no buffer pool")
	case cfg.Workers < 1 || cfg.Workers > 1024:
		return cfg, fmt.Errorf("endpoint: %d workers", cfg.Workers)
	case cfg.Consumer < 0 || cfg.Consumer > 0xffff:
		return cfg, fmt.Errorf("endpoint: consumer index %d", cfg.Consumer)
	case cfg.RingSize < 2 || cfg.RingSize > 1<<20:
		return cfg, fmt.Errorf("endpoint: ring size %d outside [2, %d]", cfg.RingSize, 1<<20)
	case cfg.Quota < 1:
		return cfg, fmt.Errorf("endpoint: quota %d", cfg.Quota)
	case cfg.SendBufs < 2 || cfg.SendBufs > 1<<16:
		return cfg, fmt.Errorf("endpoint: send buffers %d outside [2, %d]", cfg.SendBufs, 1<<16)
	case int(cfg.SendClass) >= cfg.Pool.NumClasses():
		return cfg, fmt.Errorf("endpoint: send class %d: %w", cfg.SendClass, buffer.ErrClass)
	}
	return cfg, nil
}

// pow2 rounds n up to a power of two, at least 2.
func pow2(n int) int {
	if n <= 2 {
		return 2
	}
	return 1 << bits.Len(uint(n-1))
}
