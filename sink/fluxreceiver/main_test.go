package fluxreceiver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The sink starts goroutines (its Run, its notifications): none outlives the
// tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
