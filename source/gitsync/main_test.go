package gitsync_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The source, the controller and the credentials start goroutines (the
// informers, the status writes, the configuration's and the Secrets'
// watches): none outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
