package webhook

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

type countingTriggerer struct{ n atomic.Int64 }

func (c *countingTriggerer) Trigger(url string) bool {
	c.n.Add(1)
	return strings.Contains(url, "watched")
}

// The limiter remembers only watched repositories, and only for an
// interval: made-up URLs, however many, leave nothing behind.
func TestLimiterMemoryIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &countingTriggerer{}
		l := newLimiter(time.Second, tr)
		defer l.close()
		for i := range 50_000 {
			assert.False(t, l.hint(fmt.Sprint("k", i), fmt.Sprint("https://x/made-up-", i)))
		}
		assert.Zero(t, l.size(), "unwatched URLs are not remembered")

		assert.True(t, l.hint("w", "https://x/watched"))
		assert.True(t, l.hint("w", "https://x/watched"), "coalesced, still watched")
		assert.Equal(t, 2, l.size(), "one key and its pending hint")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, int64(50_002), tr.n.Load(), "the coalesced hint fired once")
		l.hint("other", "https://x/other")
		assert.Zero(t, l.size(), "a watched key is forgotten an interval after its last hint")
	})
}
