// Package watchertest provides fakes for testing code that wires a
// watcher: a [Source] that targets can be pushed into, a recording [Sink]
// and a recording [Observer], each with helpers that wait for what a test
// expects. It is to package watcher what net/http/httptest is to net/http.
package watchertest
