// Package gittest runs a real git server over smart HTTP on loopback for
// tests: git http-backend behind net/http/cgi, with optional basic auth, a
// request counter per repository, a record of every request, a policy that
// refuses, holds or delays requests as public forges do (policy.go), and
// helpers that create repositories and commits quickly with the git CLI.
package gittest

// TB is the part of testing.TB the helpers use, so that programs other
// than tests (the quickstart) can use them too.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}
