package tunkind

import (
	"errors"
	"fmt"
	"log/slog"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/port"
	"softnet.dev/tun"
)

// opened is an open tun or tap port.
type opened struct {
	dev     *tun.Device
	kernel0 tun.KernelStats // the device's kernel counters at open
}

func open(cfg tun.Config, log *slog.Logger) (*opened, error) {
	d, err := tun.Open(cfg)
	if errors.Is(err, tun.ErrNoDevice) {
		return nil, fmt.Errorf("%w: %w", portkind.ErrGone, err)
	}
	if err != nil {
		return nil, err
	}
	o := &opened{dev: d}
	// The report counts from here: an existing device's counters
	// include what happened before the switch.
	if o.kernel0, err = d.KernelStats(); err != nil {
		log.Warn("port kernel counters", "port", d.Info().Name, "err", err)
	}
	return o, nil
}

func (o *opened) Port() port.Port { return o.dev }

var _ portkind.Keeper = (*opened)(nil)

// Persist makes a device the switch created (or adopted) outlive it if
// it dies; one it attached to is not its own, and outlives it anyway.
func (o *opened) Persist() error {
	if !o.dev.Created() {
		return nil
	}
	return o.dev.Persist()
}

// Keep leaves a device the switch created (or adopted) in place when
// the port closes.
func (o *opened) Keep() error {
	if !o.dev.Created() {
		return nil
	}
	return o.dev.Keep()
}

// Describe says whether the device was created or attached to, and
// which I/O path it got (and why not io_uring).
func (o *opened) Describe() []any {
	how := "attached to existing"
	if o.dev.Created() {
		how = "created"
	}
	io, why := o.dev.IO()
	attrs := []any{"device", how, "info", o.dev.Info().String(), "io", io.String()}
	if why != nil {
		attrs = append(attrs, "io_fallback", why.Error())
	}
	return attrs
}

// Stats are the device's counters and the kernel's since it opened: a
// device's queue loses packets before softnet can count them, which
// only the kernel's counters show. They are read while the device is
// open (the switch reads its report before closing the ports).
func (o *opened) Stats() portkind.Stats {
	s := portkind.Stats{Stats: o.dev.Stats()}
	if k, err := o.dev.KernelStats(); err != nil {
		s.KernelErr = err.Error()
	} else {
		k = k.Sub(o.kernel0)
		s.Kernel = &k
	}
	return s
}

// Change is never asked: Live is false.
func (o *opened) Change(portkind.Options) error { return errNoChange }
