package flux_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The source starts goroutines (its informers): none outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
