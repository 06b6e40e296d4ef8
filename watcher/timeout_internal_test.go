package watcher

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A remote's bounds are the longest of its targets' Timeouts, one without
// counting as the watcher's, none past the watcher's; its listing's never
// past the list timeout.
func TestARemotesTimeoutsAreItsTargets(t *testing.T) {
	const list, fetch = 30 * time.Second, 10 * time.Minute
	of := func(ds ...time.Duration) []*pollState {
		var out []*pollState
		for _, d := range ds {
			out = append(out, &pollState{bound: &boundTarget{target: Target{Timeout: d}}})
		}
		return out
	}
	for _, tc := range []struct {
		targets           []*pollState
		wantList, wantGet time.Duration
	}{
		{nil, list, fetch},
		{of(0), list, fetch},
		{of(time.Second), time.Second, time.Second},
		{of(time.Second, time.Minute), list, time.Minute},
		{of(time.Second, 0), list, fetch},
		{of(24 * time.Hour), list, fetch},
		{of(time.Millisecond, 24*time.Hour), list, fetch},
	} {
		gotList, gotFetch := timeouts(tc.targets, list, fetch)
		assert.Equal(t, tc.wantList, gotList)
		assert.Equal(t, tc.wantGet, gotFetch)
	}
}
