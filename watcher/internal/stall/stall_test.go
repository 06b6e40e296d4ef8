package stall_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/modwatch/modwatch/watcher/internal/stall"
)

// A fetch without progress yields once, then is aborted; progress puts
// both off. The clock is the bubble's.
func TestYieldsThenAborts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var progress, yields atomic.Int64
		aborted := make(chan struct{})
		stop := stall.Watch(context.Background(), progress.Load, time.Minute, 3*time.Minute,
			func() { yields.Add(1) }, func() { close(aborted) })
		defer stop()
		time.Sleep(50 * time.Second)
		progress.Add(1) // seen at the next look, at 60s: idle from then on
		time.Sleep(60 * time.Second)
		synctest.Wait()
		assert.Zero(t, yields.Load(), "no yield within a minute of the last progress")
		time.Sleep(15 * time.Second)
		synctest.Wait()
		assert.Equal(t, int64(1), yields.Load(), "a minute without progress: it yields")
		<-aborted
		assert.Equal(t, int64(1), yields.Load(), "once")
	})
}
