package lab

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a run or a flow starts (forwarders, workers, process
// reapers, generators) must be gone when it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
