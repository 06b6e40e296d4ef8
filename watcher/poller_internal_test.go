package watcher

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/go-logr/logr/funcr"

	"github.com/modwatch/modwatch/watcher/internal/pool"

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
	l := &listing{buf: buf, jobs: append(*buf, job{poll: &pollState{}, missing: true}, job{poll: &pollState{}})}
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

// A remote's one timer, stopped by a poll just after it fired but before
// its function recorded the poll due, does not make the next generation
// due when that function goes on after the timer is set again: a poke
// racing the timer polls once, not twice.
func TestALateFiringOfAStoppedTimerIsStale(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &remote{env: newEnv(options{})}
	r.env.polls = pool.New(ctx, 1) // the remote is not in it: scheduling does nothing
	release, began, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	r.gen, r.armed = 1, 1
	var fired atomic.Bool
	r.timer = time.AfterFunc(0, func() {
		if fired.Swap(true) {
			r.fire()
			return
		}
		close(began) // the first firing waits
		<-release
		r.fire()
		close(ended)
	})
	<-began
	r.stopTimer() // a poke's poll: the timer fired, its function waits
	r.arm(time.Hour)
	close(release)
	<-ended
	r.mu.Lock()
	assert.Zero(t, r.stale)
	assert.NotEqual(t, r.gen, r.due, "the late firing made the next generation due")
	r.mu.Unlock()

	// A timer that fires and records before the poll stops it is not stale.
	r.timer.Reset(0)
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.due == r.gen }, 10*time.Second, time.Millisecond)
	r.stopTimer()
	r.mu.Lock()
	assert.Zero(t, r.stale)
	r.mu.Unlock()
	r.timer.Stop()
}

// What every target keeps stays within the size classes it was measured
// at on 64-bit platforms (docs/performance.md; smaller elsewhere): a field added in the wrong place, or a string
// where a struct was, costs a larger class for each of 100,000 targets.
func TestWhatATargetKeepsStaysInItsSizeClass(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(deliverer{}), uintptr(352), "a deliverer, one per target and sink")
	assert.LessOrEqual(t, unsafe.Sizeof(boundTarget{}), uintptr(288), "a bound target")
	assert.LessOrEqual(t, unsafe.Sizeof(commitOffer{}), uintptr(176), "the last commit offered to a target")
}
