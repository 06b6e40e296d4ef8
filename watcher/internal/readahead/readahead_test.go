package readahead

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
)

// ones is a batch's get: 1 for each key.
func ones(n int) func() ([]int, error) {
	return func() ([]int, error) {
		got := make([]int, n)
		for i := range got {
			got[i] = 1
		}
		return got, nil
	}
}

// What a batch serves is what no write changed: a key being written when
// the batch starts, or written while it is read or after, is not served; a
// read of a key whose batch is being read waits for it; each key is served
// once, to the run of its own owner that claimed it; what a run did not
// read goes when it is forgotten; the writes leave nothing behind.
func TestCacheServesWhatNoWriteChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Cache[int]
		keys := []string{"before", "during", "after", "kept", "other", "mine"}
		owners := []string{"r1", "r1", "r1", "r1", "r1", "r2"}

		writing, wrote, written := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(written)
			_ = c.Write("before", func() error { close(writing); <-wrote; return nil })
		}()
		<-writing
		fill := c.Start(keys, owners)
		close(wrote)
		<-written
		live, stop := context.WithCancel(context.Background())
		defer stop()
		c.Claim("r1", live, keys)
		waited := make(chan int, 1)
		go func() {
			v, _ := c.Take(context.Background(), "kept", live)
			waited <- v
		}()
		started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			fill(func() ([]int, error) { close(started); <-release; return ones(len(keys))() })
		}()
		<-started
		assert.NoError(t, c.Write("during", func() error { return nil }))
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("a read of a key whose batch is being read did not wait for it")
		default:
		}
		close(release)
		<-done
		assert.Equal(t, 1, <-waited, "a read waits for the batch of its key")

		assert.NoError(t, c.Write("after", func() error { return nil }))
		for _, k := range []string{"before", "during", "after"} {
			_, ok := c.Take(context.Background(), k, live)
			assert.False(t, ok, "%s was written", k)
		}
		_, ok := c.Take(context.Background(), "other", context.Background())
		assert.False(t, ok, "another run's read is its own")
		_, ok = c.Take(context.Background(), "mine", live)
		assert.False(t, ok, "another owner's entry is not claimed")
		_, ok = c.Take(context.Background(), "kept", live)
		assert.False(t, ok, "served once")
		assert.Equal(t, map[string]int{}, c.writing, "the writes leave nothing behind")

		c.Forget(live, []string{"other", "mine"})
		assert.NotContains(t, c.entries, "other", "what the run did not read goes")
		assert.Contains(t, c.entries, "mine", "another run's entry stays")
	})
}

// An owner that did not start leaves nothing behind; a failed batch keeps
// nothing; a claimed entry is not dropped.
func TestCacheDropAndFailedBatch(t *testing.T) {
	var c Cache[int]
	fill := c.Start([]string{"a", "b"}, []string{"r1", "r1"})
	c.Drop("r1", []string{"a", "b"})
	fill(ones(2))
	assert.Zero(t, c.Len())

	live := context.Background()
	fill = c.Start([]string{"a", "b"}, []string{"r1", "r1"})
	c.Claim("r1", live, []string{"a"})
	c.Drop("r1", []string{"a", "b"})
	assert.Equal(t, 1, c.Len(), "a claimed entry stays")
	fill(func() ([]int, error) { return nil, errors.New("unreadable") })
	_, ok := c.Take(context.Background(), "a", live)
	assert.False(t, ok, "a failed batch serves nothing")
	assert.Zero(t, c.Len())
}

// A read waiting for a batch gives up when its run stops.
func TestCacheWaitEndsWithTheRun(t *testing.T) {
	var c Cache[int]
	c.Start([]string{"a"}, []string{"r1"}) // never read
	live, stop := context.WithCancel(context.Background())
	c.Claim("r1", live, []string{"a"})
	stop()
	_, ok := c.Take(context.Background(), "a", live)
	assert.False(t, ok)
}
