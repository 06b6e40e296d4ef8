// Package watchertest provides what a test of code that wires a watcher
// needs: a [Repo] to commit to (in memory, served over smart HTTP on
// loopback by go-git; no git binary, no network), a [Git] held in memory
// for tests that need no git server at all, a [Source] that targets
// can be pushed into, a recording [Sink] and [Observer] with helpers that
// wait for what a test expects, [NewWatcher] set up for a test, and [Run]
// to run it for the test's length. It is to package watcher what
// net/http/httptest is to net/http.
package watchertest
