package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"softnet.dev/port"
)

// ErrNoPort is returned for a port index that holds no port.
var ErrNoPort = errors.New("no such port")

// adoptTimeout bounds how long AddPort and RemovePort wait for every
// worker to take up a change: a round, or a wake-up from sleep, is
// microseconds; only a stuck worker takes longer.
const adoptTimeout = 2 * time.Second

// AddPort adds p while the workers run (or before they start) and
// returns its index, as program verdicts use it: the lowest index no
// port holds. When AddPort returns, every running worker polls p's
// queues. p must not be used by anyone else from then on; the engine
// closes it (RemovePort, Close).
func (e *Engine) AddPort(p port.Port) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, errors.New("engine: closed")
	}
	cur := e.set.Load()
	ps, err := e.checkPort(cur, p)
	if err != nil {
		return 0, err
	}
	next := &portSet{gen: cur.gen + 1, ports: slices.Clone(cur.ports)}
	ps.index = slices.Index(next.ports, nil)
	if ps.index < 0 {
		ps.index = len(next.ports)
		next.ports = append(next.ports, nil)
	}
	next.ports[ps.index] = ps
	return ps.index, e.publish(next)
}

// FreeIndex returns the index the next AddPort gives, so that programs
// can be told about a port (its policy, say) before its first packet.
// It holds only while nothing else adds ports.
func (e *Engine) FreeIndex() int {
	set := e.set.Load()
	if i := slices.Index(set.ports, nil); i >= 0 {
		return i
	}
	return len(set.ports)
}

// RemovePort removes the port with the given index while the workers
// run: once every worker has given up its queues (between two of its
// rounds, without a lock on their side), the port is closed, purging
// what it still holds with drop.QueuePurge, so that every buffer it had
// comes home. Packets that programs still send to the index are dropped
// with drop.NoRoute.
func (e *Engine) RemovePort(index int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("engine: closed")
	}
	cur := e.set.Load()
	p := cur.port(index)
	if p == nil {
		return fmt.Errorf("engine: port %d: %w", index, ErrNoPort)
	}
	next := &portSet{gen: cur.gen + 1, ports: slices.Clone(cur.ports)}
	next.ports[index] = nil
	if err := e.publish(next); err != nil {
		// A worker may still use the port: closing it now could free
		// what the worker reads. Close closes it, once they stopped.
		e.orphans = append(e.orphans, p)
		return err
	}
	p.tap.Store(nil)
	if err := p.port.Close(e.ctl); err != nil {
		return fmt.Errorf("engine: close port %s: %w", p.info.Name, err)
	}
	return nil
}

// publish makes next the workers' ports and, if they run, waits until
// each has taken it up. e.mu is held, so they keep running meanwhile.
func (e *Engine) publish(next *portSet) error {
	e.set.Store(next)
	if !e.running {
		return nil // each worker adopts the set when it starts
	}
	for _, w := range e.workers {
		w.wake()
	}
	deadline := time.Now().Add(adoptTimeout)
	pause := 20 * time.Microsecond
	for _, w := range e.workers {
		for w.adopted.Load() < next.gen {
			if time.Now().After(deadline) {
				return fmt.Errorf("engine: worker %d did not take up the change within %v", w.index, adoptTimeout)
			}
			time.Sleep(pause)
			pause = min(2*pause, time.Millisecond)
		}
	}
	return nil
}
