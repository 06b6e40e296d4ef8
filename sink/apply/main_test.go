package apply_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The sink starts goroutines (applies, the inventory sweep): none outlives
// the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
