package gitutil

import (
	"testing"

	"go.uber.org/goleak"
)

// Idle keep-alive connections in go-git's shared HTTP transport are not
// goroutines of ours.
var leakOpts = []goleak.Option{
	goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOpts...)
}
