package cluster_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The shard, the store and the Runnable start goroutines (the Lease
// renewals, the member lists, the watcher): none outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
