package gitutil

import (
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A mirror's object cache keeps what it holds while it is used and
// empties itself once idle; a use after that fills it again, and it
// empties again.
func TestIdleCacheEmptiesWhenIdle(t *testing.T) {
	const idle = 50 * time.Millisecond
	c := newIdleCache(cache.NewObjectLRU(cache.MiByte), idle)
	obj := func(s string) plumbing.EncodedObject {
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.BlobObject)
		_, err := o.Write([]byte(s))
		require.NoError(t, err)
		return o
	}
	a, b := obj("a"), obj("b")
	c.Put(a)
	for range 5 { // used more often than idle: kept
		time.Sleep(idle / 3)
		_, ok := c.Get(a.Hash())
		require.True(t, ok, "emptied while in use")
	}
	assert.Eventually(t, func() bool {
		_, ok := c.Object.Get(a.Hash()) // the inner cache: not a use
		return !ok
	}, 10*idle, idle/5, "emptied once idle")
	c.Put(b)
	_, ok := c.Get(b.Hash())
	assert.True(t, ok)
	assert.Eventually(t, func() bool {
		_, ok := c.Object.Get(b.Hash())
		return !ok
	}, 10*idle, idle/5, "emptied again")
}

// Every mirror's store reads through one.
func TestMirrorStoreCacheIsIdleCache(t *testing.T) {
	m, err := OpenMirror(t.TempDir(), "https://example.invalid/r.git", MirrorOptions{})
	require.NoError(t, err)
	st, ok := m.repo.Storer.(*mirrorStore)
	require.True(t, ok, "%T", m.repo.Storer)
	c, ok := st.objects.cache.(*idleCache)
	require.True(t, ok, "%T", st.objects.cache)
	assert.Equal(t, mirrorCacheIdle, c.idle)
}
