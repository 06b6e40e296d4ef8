package watcher

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A poll's job slice goes back for the next poll holding no target, and
// is given out again only where it is big enough: the slices kept for
// reuse never keep a removed target's state alive, and a poll never
// appends past them.
func TestAPollsJobsGoBackHoldingNoTarget(t *testing.T) {
	buf := takeJobs(3)
	require.GreaterOrEqual(t, cap(*buf), 3)
	l := &listed{buf: buf, jobs: append(*buf, job{p: &polled{}, missing: true}, job{p: &polled{}})}
	l.release()
	assert.Nil(t, l.jobs)
	assert.Nil(t, l.buf)
	kept := (*buf)[:cap(*buf)]
	assert.Empty(t, *buf)
	for i, j := range kept {
		assert.Zero(t, j, "element %d of the kept slice", i)
	}
	l.release() // twice: nothing more
	for range 10 {
		got := takeJobs(cap(kept) + 1)
		assert.Greater(t, cap(*got), cap(kept), "a slice too small is not given out")
	}
}
