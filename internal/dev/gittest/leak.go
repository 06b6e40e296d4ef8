package gittest

import "go.uber.org/goleak"

// LeakOptions are the goleak options of every test package that talks to
// the git server: idle keep-alive connections in the shared HTTP transports
// (go-git's, net/http's default) are not goroutines of the code under test.
var LeakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
}
