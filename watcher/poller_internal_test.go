package watcher

import (
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

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

// A poll's report allocates nothing when its log line is not written (a
// watcher's log below verbosity 1), so a poll that finds nothing new
// costs the collector nothing for it; the line is written at verbosity 1.
func TestAPollsReportAllocatesNothingUnlogged(t *testing.T) {
	var lines []string
	log := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0})
	r := &remote{env: newEnv(options{}), redacted: "https://example.com/repo"}
	r.env.log = log
	start := time.Now()
	assert.Zero(t, testing.AllocsPerRun(100, func() { r.reportPoll(start, nil) }))
	assert.Empty(t, lines)
	r.env.log = funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 1})
	r.reportPoll(start, nil)
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], `"msg"="polled"`)
}
