package packview

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A mirror's object cache keeps what it holds while it is used and
// empties itself once idle; a use after that fills it again, and it
// empties again. (Fake time in a synctest bubble: the timers are the
// cache's own.)
func TestIdleCacheEmptiesWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 30 * time.Second
		c := NewIdleCache(NewObjectLRU(cache.MiByte), idle)
		held := func(o plumbing.EncodedObject) bool {
			synctest.Wait()                 // a check that is due has run
			_, ok := c.Object.Get(o.Hash()) // the inner cache: not a use
			return ok
		}
		a, b := blob(t, "a"), blob(t, "b")
		c.Put(a)
		for range 5 { // used more often than idle: kept
			time.Sleep(idle / 3)
			_, ok := c.Get(a.Hash())
			require.True(t, ok, "emptied while in use")
		}
		time.Sleep(idle - time.Second)
		assert.True(t, held(a), "kept until idle")
		time.Sleep(time.Second)
		assert.False(t, held(a), "emptied once idle")
		c.Put(b)
		assert.True(t, held(b))
		time.Sleep(idle)
		assert.False(t, held(b), "emptied again")
	})
}
