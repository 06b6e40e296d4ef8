package gittest

import "time"

// ReentryWait bounds what a test of a deadlock waits for: a deadlock fails
// it then, leaving its goroutines behind, rather than hang the package.
const ReentryWait = 10 * time.Second

// ReturnsWithin fails t when fn has not returned within [ReentryWait].
func ReturnsWithin(t TB, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(ReentryWait):
		t.Fatalf("%s did not return within %s: deadlocked", what, ReentryWait)
	}
}
