package lab

import (
	"errors"
	"fmt"
)

// undoStack records how to remove each thing a variant creates, as it is
// created, so that whatever happens next (an error, Ctrl-C) the variant
// can be taken down completely and in reverse order: processes before the
// switch, the switch (which removes its devices) before the namespaces.
type undoStack struct {
	steps []undoStep
}

type undoStep struct {
	what string
	f    func() error
}

// push registers f, which removes what, to run at unwind.
func (u *undoStack) push(what string, f func() error) {
	u.steps = append(u.steps, undoStep{what, f})
}

// unwind runs every registered step, last first, even after one fails,
// and returns their errors joined. It may be called again: steps already
// run are gone.
func (u *undoStack) unwind() error {
	var errs []error
	for len(u.steps) > 0 {
		s := u.steps[len(u.steps)-1]
		u.steps = u.steps[:len(u.steps)-1]
		if err := s.f(); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", s.what, err))
		}
	}
	return errors.Join(errs...)
}
