package drop

import "encoding/json"

// Counts holds one counter per Reason. It is a plain array: a worker owns
// its Counts and increments them without atomics; readers sum snapshots.
type Counts [NumReasons]uint64

// Add adds o into c.
func (c *Counts) Add(o *Counts) {
	for i := range c {
		c[i] += o[i]
	}
}

// Total returns the sum over all reasons.
func (c *Counts) Total() uint64 {
	var t uint64
	for _, n := range c {
		t += n
	}
	return t
}

// MarshalJSON writes the non-zero counters as an object keyed by reason
// name, e.g. {"NOMEM":3}.
func (c Counts) MarshalJSON() ([]byte, error) {
	m := make(map[string]uint64)
	for r, n := range c {
		if n != 0 {
			m[Reason(r).String()] = n
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the form written by MarshalJSON.
func (c *Counts) UnmarshalJSON(b []byte) error {
	var m map[Reason]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = Counts{}
	for r, n := range m {
		c[r] = n
	}
	return nil
}
