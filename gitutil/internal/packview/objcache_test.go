package packview

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func blob(t testing.TB, s string) plumbing.EncodedObject {
	o := &plumbing.MemoryObject{}
	o.SetType(plumbing.BlobObject)
	_, err := o.Write([]byte(s))
	require.NoError(t, err)
	return o
}

// The cache keeps at most its size, evicting the least recently used; an
// object larger than the cache is not kept; a Put of what it holds is a
// use; Clear empties it.
func TestObjectLRU(t *testing.T) {
	c := NewObjectLRU(30)
	a, b, d := blob(t, strings.Repeat("a", 10)), blob(t, strings.Repeat("b", 10)), blob(t, strings.Repeat("d", 10))
	c.Put(a)
	c.Put(b)
	c.Put(d)
	_, ok := c.Get(a.Hash()) // a is now the most recent
	require.True(t, ok)
	c.Put(blob(t, strings.Repeat("e", 10)))
	_, ok = c.Get(b.Hash())
	assert.False(t, ok, "the least recently used went")
	for _, o := range []plumbing.EncodedObject{a, d} {
		_, ok := c.Get(o.Hash())
		assert.True(t, ok)
	}
	assert.LessOrEqual(t, c.size, c.max)
	c.Put(blob(t, strings.Repeat("x", 31)))
	assert.Equal(t, 3, c.ll.Len(), "larger than the cache: not kept")
	c.Put(a)
	assert.Equal(t, 3, c.ll.Len(), "held already: a use")
	c.Clear()
	_, ok = c.Get(a.Hash())
	assert.False(t, ok)
	assert.Zero(t, c.size)
	assert.Nil(t, c.m, "its memory goes with it")
	c.Put(a)
	_, ok = c.Get(a.Hash())
	assert.True(t, ok, "usable after Clear")
}

// A cache that holds three objects costs three entries, not a thousand:
// what one file system or one idle mirror pays. The baseline, in the same
// run: go-git's cache.ObjectLRU with the same three objects.
func BenchmarkObjectLRUFirstPuts(b *testing.B) {
	objs := make([]plumbing.EncodedObject, 3)
	for i := range objs {
		objs[i] = blob(b, fmt.Sprint(i))
	}
	for name, newCache := range map[string]func() cache.Object{
		"gitutil": func() cache.Object { return NewObjectLRU(8 << 20) },
		"go-git":  func() cache.Object { return cache.NewObjectLRU(8 << 20) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := newCache()
				for _, o := range objs {
					c.Put(o)
				}
			}
		})
	}
}
